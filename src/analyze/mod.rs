//! Reading curves: knee, Universal Scalability Law, Little's law, latency modes, noise.
//!
//! Everything here is a pure function over numbers a run (or a table from elsewhere) already
//! holds, so the report module, `compare` and `stairbench analyze` share one implementation and
//! the tests can check it against independent methods. [`run`] applies them to a run
//! directory's steps (analysis.json); [`compare`] sets steps and runs against each other. Both
//! read the run's records and nothing above this layer: `report` renders what they find.

pub mod budget;
pub mod changes;
pub mod compare;
pub mod history;
pub mod knee;
pub mod little;
pub mod modes;
pub mod run;
pub mod series;
pub mod stats;
pub mod table;
pub mod thresholds;
pub mod usl;

/// Why each series stops scaling (it lives beside the run analysis it reads).
pub use run::diagnosis;
pub use series::{analyze_table, Analysis, AnalyzeError, AnalyzeOptions, GroupAnalysis};
