//! The run's configuration: the TOML file `vauban run` and `vauban
//! validate` read, and the prompt suite it names.

pub mod suite;

pub use suite::{Prompt, Redaction, Suite, SuiteError};
