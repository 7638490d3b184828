//! The run's configuration: the TOML file `vauban run`, `vauban diff` and
//! `vauban validate` read ([`file`]), and the prompt suite it names
//! ([`suite`]). Checks that need more than the file (paths, plugins,
//! gate metrics) are the pipeline's plan (`crate::pipeline::plan`).

pub mod file;
pub mod suite;

pub use file::{ConfigError, ConfigFile};
pub use suite::{Prompt, Redaction, Suite, SuiteError};
