//! The run's configuration: the TOML file `vauban run` and `vauban
//! validate` read ([`file`]), the prompt suite it names ([`suite`]), and
//! the checks that need more than the file ([`check`]).

pub mod file;
pub mod suite;

pub use file::{ConfigError, ConfigFile};
pub use suite::{Prompt, Redaction, Suite, SuiteError};
