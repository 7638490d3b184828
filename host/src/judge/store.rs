//! Judge answers kept as evidence: one file per answer under the sha256 of
//! the judge's identity and the request, written atomically. A run asks a
//! judge only what the store lacks; a replay reads the store alone; a
//! damaged file is asked again, never read as an answer, and another judge
//! model (or executor) misses the store instead of borrowing its answers.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{JudgeAnswer, JudgeRequest};

/// One kept answer, with what it answered and who.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgeRecord {
    /// The judge's name in the config.
    pub judge: String,
    /// What identifies the judge model ([`super::LocalJudge::identity`]).
    pub identity: serde_json::Value,
    pub request: JudgeRequest,
    pub answer: JudgeAnswer,
    /// Wall time of the answer when it was asked.
    pub elapsed_ms: f64,
}

/// The answers of one run's judges, in a folder.
#[derive(Debug, Clone)]
pub struct JudgeStore {
    dir: PathBuf,
}

impl JudgeStore {
    pub fn new(dir: &Path) -> JudgeStore {
        JudgeStore {
            dir: dir.to_path_buf(),
        }
    }

    /// The key of `request` to a judge of `identity`.
    pub fn key(identity: &serde_json::Value, request: &JudgeRequest) -> String {
        let both = serde_json::json!({ "judge": identity, "request": request });
        crate::hash::sha256_hex(both.to_string().as_bytes())
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }

    /// The record kept under `key`, when there is a readable one.
    pub fn get(&self, key: &str) -> Option<JudgeRecord> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::warn!(
                    "asking again: judge record {} unreadable ({e})",
                    path.display()
                );
                None
            }
        }
    }

    /// The identities of the judge named `judge` in the kept records, the
    /// most recently kept first: what a replay asks the record under.
    pub fn identities(&self, judge: &str) -> Vec<serde_json::Value> {
        let mut found: Vec<(std::time::SystemTime, serde_json::Value)> = Vec::new();
        for (when, record) in self.records().filter(|(_, r)| r.judge == judge) {
            match found.iter_mut().find(|(_, id)| *id == record.identity) {
                Some(seen) => seen.0 = seen.0.max(when),
                None => found.push((when, record.identity)),
            }
        }
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        found.into_iter().map(|(_, id)| id).collect()
    }

    /// The names of the judges the record holds answers of, sorted.
    pub fn judges(&self) -> Vec<String> {
        let names: std::collections::BTreeSet<String> =
            self.records().map(|(_, r)| r.judge).collect();
        names.into_iter().collect()
    }

    /// Every readable record, with when it was kept.
    fn records(&self) -> impl Iterator<Item = (std::time::SystemTime, JudgeRecord)> {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| {
                let record = std::fs::read(e.path())
                    .ok()
                    .and_then(|b| serde_json::from_slice::<JudgeRecord>(&b).ok())?;
                let when = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                Some((when, record))
            })
    }

    /// The folder the answers are kept in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Keeps `record` under `key`.
    pub fn put(&self, key: &str, record: &JudgeRecord) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let bytes = serde_json::to_vec_pretty(record).expect("a record serializes");
        crate::atomic_file::write(&self.path(key), &bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::Ask;

    fn request(prompt: &str) -> JudgeRequest {
        JudgeRequest {
            prompt: prompt.into(),
            system: None,
            raw: false,
            ask: Ask::Choices {
                options: vec!["yes".into(), "no".into()],
            },
        }
    }

    /// A record comes back as kept; another request or another judge
    /// misses; a damaged file is not an answer.
    #[test]
    fn records_are_found_by_judge_and_request() {
        let dir = tempfile::tempdir().unwrap();
        let store = JudgeStore::new(dir.path());
        let identity = serde_json::json!({ "model": "m", "sha256": "ab" });
        let r = JudgeRecord {
            judge: "j".into(),
            identity: identity.clone(),
            request: request("does it refuse?"),
            answer: JudgeAnswer {
                text: None,
                choices: Vec::new(),
                prompt_tokens: 4,
                answer_tokens: 2,
            },
            elapsed_ms: 1.5,
        };
        let key = JudgeStore::key(&identity, &r.request);
        assert!(store.get(&key).is_none());
        store.put(&key, &r).unwrap();
        assert_eq!(store.get(&key), Some(r.clone()));
        assert_ne!(key, JudgeStore::key(&identity, &request("does it comply?")));
        let other = serde_json::json!({ "model": "m", "sha256": "cd" });
        assert_ne!(key, JudgeStore::key(&other, &r.request));
        std::fs::write(dir.path().join(format!("{key}.json")), b"{ torn").unwrap();
        assert!(store.get(&key).is_none());
    }
}
