//! Exporters of a run directory, one per format behind one trait.

pub mod cli;
pub mod html;
pub mod svg;
