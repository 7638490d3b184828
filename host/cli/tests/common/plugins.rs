//! The workspace's plugins (first-party and test) as components: built once
//! by the `vauban-test-artifacts` build script when the tests compile.

use std::path::PathBuf;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The component for a plugin crate (`vauban-plugin-refusal`, `vauban-test-evil`).
pub fn wasm(package: &str) -> PathBuf {
    let path = vauban_test_artifacts::component(package).unwrap_or_else(|| {
        panic!("{package} is not built by tests/artifacts; add it to its build.rs PACKAGES")
    });
    PathBuf::from(path)
}
