//! Puts the commit the binary is built from into `vauban --version`
//! (`VAUBAN_COMMIT`): `git describe --always --dirty`, or `unknown` where
//! there is no git (a source archive). With the `torch` or `mlx` feature,
//! records where the binary finds the library it was linked against.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=VAUBAN_COMMIT={commit}");
    // A new commit or a checkout moves HEAD; the index changes with `git add`.
    if let Ok(o) = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .output()
        && o.status.success()
    {
        let dir = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        for f in ["HEAD", "index"] {
            println!("cargo:rerun-if-changed={dir}/{f}");
        }
        // A commit moves the branch's ref, not HEAD.
        if let Ok(r) = Command::new("git")
            .args(["symbolic-ref", "-q", "HEAD"])
            .output()
            && r.status.success()
        {
            let name = String::from_utf8_lossy(&r.stdout).trim().to_owned();
            // A fresh clone keeps refs packed; a missing path would rerun
            // this script on every build.
            for f in [name.as_str(), "packed-refs"] {
                if std::path::Path::new(&format!("{dir}/{f}")).exists() {
                    println!("cargo:rerun-if-changed={dir}/{f}");
                }
            }
        }
    }
    native_library_paths();
}

/// The folders of libtorch (`LIBTORCH`, from scripts/setup-torch.sh) and
/// MLX (`MLX_SYS_MLX_DIR`, from scripts/setup-mlx.sh) the binary was
/// linked against, as its run path, for the features built: `vauban`
/// then starts from any shell, without the `LD_LIBRARY_PATH` those
/// scripts export for the build.
fn native_library_paths() {
    for (feature, var) in [
        ("CARGO_FEATURE_TORCH", "LIBTORCH"),
        ("CARGO_FEATURE_MLX", "MLX_SYS_MLX_DIR"),
    ] {
        println!("cargo:rerun-if-env-changed={var}");
        if std::env::var_os(feature).is_some()
            && let Some(root) = std::env::var_os(var)
        {
            let lib = std::path::Path::new(&root).join("lib");
            println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{}", lib.display());
        }
    }
}
