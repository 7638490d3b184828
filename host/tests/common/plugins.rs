//! Builds the workspace's plugins (first-party and test) as components, once
//! per test binary, with the same cargo that runs the tests.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The component for a plugin crate (`vauban-plugin-refusal`, `vauban-test-evil`).
pub fn wasm(package: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let target = root().join("target").join("plugins");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .current_dir(root())
            .args(["build", "--locked", "--profile", "plugin", "--target", "wasm32-wasip2"])
            .args(PACKAGES.iter().flat_map(|p| ["-p", p]))
            .env("CARGO_TARGET_DIR", &target)
            // The test's own flags are for the host, not for wasm.
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .status()
            .expect("run cargo to build the plugins");
        assert!(status.success(), "building the plugins failed (is the wasm32-wasip2 target installed? scripts/setup.sh adds it)");
        target.join("wasm32-wasip2").join("plugin")
    });
    dir.join(format!("{}.wasm", package.replace('-', "_")))
}

const PACKAGES: [&str; 14] = [
    "vauban-plugin-refusal",
    "vauban-plugin-behavior",
    "vauban-plugin-logprob",
    "vauban-plugin-steer-gate",
    "vauban-plugin-claims-default",
    "vauban-test-evil",
    "vauban-test-evil-socket",
    "vauban-test-wrong-wit",
    "vauban-test-overclaim",
    "vauban-test-tensor-probe",
    "vauban-test-v0-1-scorer",
    "vauban-test-v0-1-policy",
    "vauban-test-v0-1-claims",
    "uppercase-scorer",
];
