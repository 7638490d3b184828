//! The reference environment's python (transformers, torch, numpy:
//! `scripts/setup-reference.sh`, which setup.sh installs), and Inspect's
//! (`scripts/setup-inspect.sh`): `None`, after a
//! message, where it is not installed, unless `VAUBAN_REQUIRE_REFERENCE=1`
//! (CI), under which a test needing it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn python() -> Option<PathBuf> {
    python_of("setup-reference.sh")
}

/// Inspect's environment's python (`scripts/setup-inspect.sh`), on the
/// same terms.
#[allow(dead_code)] // not every test binary runs Inspect
pub fn inspect_python() -> Option<PathBuf> {
    python_of("setup-inspect.sh")
}

fn python_of(script: &str) -> Option<PathBuf> {
    let out = Command::new("bash")
        .arg(root().join("scripts").join(script))
        .arg("--cached")
        .output()
        .unwrap();
    if out.status.success() {
        let path = String::from_utf8(out.stdout).unwrap();
        return Some(PathBuf::from(path.trim()));
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if std::env::var_os("VAUBAN_REQUIRE_REFERENCE").is_some_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("skipping: {why}");
    None
}
