//! Where the server and the client run: the placement policies (`separated`, `balanced`,
//! `shared`, a custom table) over the machine's topology, and the [`PlacementSource`] the step
//! loop asks for each step's cpusets.

pub mod policy;
pub mod source;

pub use policy::*;
pub use source::*;
