//! Builds every plugin of the workspace (first-party and test) as a
//! WebAssembly component, once, when the tests are compiled, and writes
//! their paths as constants (`$OUT_DIR/components.rs`). A test binary then
//! names a component by constant and never runs cargo itself.
//!
//! The components go to `target/plugins/wasm32-wasip2/plugin/`, the folder
//! `scripts/build-plugins.sh` fills and `vauban run` searches by plugin
//! name, so one build serves both. The build script reruns when a source
//! file a component was built from changes (read from cargo's dep-info
//! files) or the WIT changes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every plugin crate: first-party (`plugins/`), test (`tests/plugins/`)
/// and example (`examples/plugins/`).
const PACKAGES: [&str; 18] = [
    "vauban-plugin-refusal",
    "vauban-plugin-refusal-judge",
    "vauban-plugin-over-refusal-judge",
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
    "vauban-test-v0-2-claims",
    "vauban-test-judge-abuse",
    "uppercase-scorer",
];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest.join("../..");
    let target = root.join("target").join("plugins");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--locked",
            "--profile",
            "plugin",
            "--target",
            "wasm32-wasip2",
        ])
        .args(PACKAGES.iter().flat_map(|p| ["-p", p]))
        .env("CARGO_TARGET_DIR", &target)
        // The flags of the build that runs this script are for the host,
        // not for wasm.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        // Under `cargo clippy` the outer build lints through clippy-driver;
        // the components are built, not linted, the same way every time.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CLIPPY_ARGS");
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build the plugins: {e}"));
    assert!(
        status.success(),
        "building the plugins as components failed (is the wasm32-wasip2 target installed? \
         `rustup target add wasm32-wasip2`, which scripts/setup.sh runs)"
    );

    let dir = target.join("wasm32-wasip2").join("plugin");
    let mut code = String::new();
    let mut table = String::new();
    let mut sources = BTreeSet::new();
    for package in PACKAGES {
        let stem = package.replace('-', "_");
        let wasm = dir.join(format!("{stem}.wasm"));
        assert!(wasm.is_file(), "cargo built no {}", wasm.display());
        sources.extend(dep_info(&dir.join(format!("{stem}.d"))));
        let name = stem.to_uppercase();
        code += &format!(
            "/// The `{package}` component.\npub const {name}: &str = {:?};\n",
            wasm.display().to_string()
        );
        table += &format!("    ({package:?}, {name}),\n");
    }
    code += &format!(
        "/// Every component, by package name.\npub const ALL: [(&str, &str); {}] = [\n{table}];\n",
        PACKAGES.len()
    );
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    std::fs::write(out.join("components.rs"), code).expect("write the component paths");

    for file in sources {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    println!("cargo:rerun-if-changed=build.rs");
}

/// The source files cargo's dep-info file (`x.d`: `target: dep dep…`, with
/// `\ ` escaping spaces) lists for one artifact.
fn dep_info(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for line in text.lines() {
        let Some((_, deps)) = line.split_once(": ") else {
            continue;
        };
        let mut current = String::new();
        for part in deps.split(' ') {
            if let Some(stripped) = part.strip_suffix('\\') {
                current.push_str(stripped);
                current.push(' ');
                continue;
            }
            current.push_str(part);
            if !current.is_empty() {
                files.push(std::mem::take(&mut current));
            }
        }
    }
    files
}
