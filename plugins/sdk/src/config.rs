//! Plugin configuration: the host passes the plugin's config table as JSON.

use serde::de::DeserializeOwned;

/// Parses `json` into the plugin's config type. Unknown keys are the
/// config type's business (`#[serde(deny_unknown_fields)]` refuses them);
/// the error names the key and the reason, for the host to show the user.
pub fn parse<T: DeserializeOwned>(json: &str) -> Result<T, String> {
    serde_json::from_str(json).map_err(|e| format!("plugin config: {e}"))
}
