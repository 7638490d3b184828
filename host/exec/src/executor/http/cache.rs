//! The response cache: every answer kept on disk under the sha256 of what
//! identifies it (the endpoint's URL, the model the config names, the model
//! id and fingerprint the server reported when probed, and the full request
//! body), so an interrupted suite asks again only for what is missing, and
//! a server that changes what it serves misses the cache instead of
//! mixing answers. Files are written atomically; a damaged one is asked
//! again, never read as an answer.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One kept answer: the response body exactly as received.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub url: String,
    pub request: Value,
    pub response: String,
    pub attempts: u32,
    pub elapsed_ms: f64,
}

#[derive(Debug, Clone)]
pub struct ResponseCache {
    dir: PathBuf,
}

impl ResponseCache {
    pub fn new(dir: &Path) -> ResponseCache {
        ResponseCache {
            dir: dir.to_path_buf(),
        }
    }

    /// The key of `body` sent to an endpoint of `identity`.
    pub fn key(identity: &Value, body: &Value) -> String {
        let both = serde_json::json!({ "endpoint": identity, "request": body });
        crate::hash::sha256_hex(both.to_string().as_bytes())
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The answer kept under `key`, when there is a readable one.
    pub fn get(&self, key: &str) -> Option<Entry> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(e) => Some(e),
            Err(e) => {
                tracing::warn!(
                    "asking again: cached answer {} unreadable ({e})",
                    path.display()
                );
                None
            }
        }
    }

    /// Keeps `entry` under `key`.
    pub fn put(&self, key: &str, entry: &Entry) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let bytes = serde_json::to_vec(entry).expect("an entry serializes");
        vauban_format::atomic_file::write(&self.path(key), &bytes)
    }

    /// Answers kept.
    pub fn len(&self) -> usize {
        std::fs::read_dir(&self.dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                    .count()
            })
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
