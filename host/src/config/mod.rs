//! The run's configuration: the TOML file `vauban run`, `vauban diff` and
//! `vauban validate` read ([`mod@file`]), and the prompt suite it names
//! ([`suite`]). Checks that need more than the file (paths, plugins,
//! gate metrics) are the pipeline's plan (`crate::pipeline::plan`).

pub mod file;
pub mod suite;

pub use file::{ConfigError, ConfigFile};
pub use suite::{Prompt, Redaction, Suite, SuiteError};

/// The JSON Schema of the run config, pretty-printed with a final newline
/// (`docs/config.schema.json`; editors that map TOML files to JSON
/// Schemas, such as taplo, complete and check configs with it).
pub fn schema() -> String {
    let mut schema = schemars::schema_for!(ConfigFile);
    schema.insert(
        "title".into(),
        "vauban run config (vauban run CONFIG.toml)".into(),
    );
    serde_json::to_string_pretty(&schema).expect("a schema serialises") + "\n"
}
