//! Puts the commit the binary is built from into `vauban --version`
//! (`VAUBAN_COMMIT`): `git describe --always --dirty`, or `unknown` where
//! there is no git (a source archive).

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
}
