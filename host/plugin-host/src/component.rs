//! What a component file declares, read before anything is compiled: its
//! world, the WIT version it was built against, and its imports, checked
//! against what the sandbox provides.

use std::fmt;

use serde::Serialize;
use wasmparser::{Encoding, Parser, Payload};

use super::wit::WitVersion;

/// The WIT package the host implements (`wit/plugin.wit`).
pub const WIT_PACKAGE: &str = "vauban:plugin";
/// Its current version. For 0.x the minor version is the breaking one: a
/// component built against 0.3.y loads in a host of 0.3.z; the host also
/// runs the earlier versions `WitVersion` names (0.1.0, 0.2.0).
pub const WIT_VERSION: &str = "0.3.0";

/// The plugin worlds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    Scorer,
    /// A scorer that asks judges through the host (0.3.0 on).
    JudgedScorer,
    InterventionPolicy,
    ClaimMapper,
}

impl World {
    /// The interface the world exports.
    pub fn interface(self) -> &'static str {
        match self {
            World::Scorer => "scorer",
            World::JudgedScorer => "judged-scorer",
            World::InterventionPolicy => "intervention-policy",
            World::ClaimMapper => "claim-mapper",
        }
    }

    /// Whether the world scores traces (and so reads tensors).
    pub fn scores(self) -> bool {
        matches!(self, World::Scorer | World::JudgedScorer)
    }

    /// The world's name in the WIT package.
    pub fn wit_name(self) -> &'static str {
        match self {
            World::Scorer => "scorer-plugin",
            World::JudgedScorer => "judged-scorer-plugin",
            World::InterventionPolicy => "intervention-policy-plugin",
            World::ClaimMapper => "claim-mapper-plugin",
        }
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.interface())
    }
}

/// Why a file is refused before compiling.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ComponentProblem {
    #[error(
        "not a WebAssembly component ({0}); build plugins with `cargo build --target wasm32-wasip2`, which emits a component"
    )]
    NotAComponent(String),
    #[error(
        "built against {WIT_PACKAGE}@{found}, but this host runs {WIT_PACKAGE}@{WIT_VERSION} (and the earlier 0.1.x); rebuild the plugin against the host's wit/plugin.wit (vauban-plugin-sdk {WIT_VERSION})"
    )]
    WitVersion { found: String },
    #[error(
        "exports none of {WIT_PACKAGE}/scorer, /judged-scorer, /intervention-policy or /claim-mapper (it exports: {0}); implement one world of wit/plugin.wit"
    )]
    NoWorld(String),
    #[error("exports more than one plugin world ({0}); a component is one plugin")]
    ManyWorlds(String),
    #[error("imports `{import}`, which the sandbox does not provide: {why}")]
    ForbiddenImport { import: String, why: &'static str },
}

/// The facts `vauban plugin inspect` prints and the loader checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComponentFacts {
    pub world: World,
    /// The `vauban:plugin` version it was built against.
    pub wit_version: String,
    /// That version, as the host dispatches on it.
    #[serde(skip)]
    pub wit: WitVersion,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// Reads the top-level imports and exports of a component and checks them.
pub fn inspect(bytes: &[u8]) -> Result<ComponentFacts, ComponentProblem> {
    let (imports, exports) = names(bytes)?;
    let mut worlds = Vec::new();
    let mut versions = Vec::new();
    for name in imports.iter().chain(&exports) {
        if let Some((interface, version)) = vauban_interface(name) {
            versions.push(version.to_owned());
            if exports.contains(name) {
                match interface {
                    "scorer" => worlds.push(World::Scorer),
                    "judged-scorer" => worlds.push(World::JudgedScorer),
                    "intervention-policy" => worlds.push(World::InterventionPolicy),
                    "claim-mapper" => worlds.push(World::ClaimMapper),
                    _ => {}
                }
            }
        }
    }
    // The version first: a plugin of another version may name its world
    // differently, and the version is the actionable fact.
    if let Some(found) = versions.iter().find(|v| WitVersion::of(v).is_none()) {
        return Err(ComponentProblem::WitVersion {
            found: found.clone(),
        });
    }
    let wit = versions
        .first()
        .and_then(|v| WitVersion::of(v))
        .unwrap_or(WitVersion::CURRENT);
    // One component, one version: mixing them would link half of it wrong.
    if let Some(other) = versions.iter().find(|v| WitVersion::of(v) != Some(wit)) {
        return Err(ComponentProblem::WitVersion {
            found: format!("{} and {other}", versions[0]),
        });
    }
    let world = match worlds.as_slice() {
        [w] => *w,
        [] => return Err(ComponentProblem::NoWorld(list_or_nothing(&exports))),
        many => {
            let names: Vec<String> = many.iter().map(|w| w.to_string()).collect();
            return Err(ComponentProblem::ManyWorlds(names.join(", ")));
        }
    };
    for import in &imports {
        check_import(import, world)?;
    }
    Ok(ComponentFacts {
        world,
        wit_version: versions.first().cloned().unwrap_or_default(),
        wit,
        imports,
        exports,
    })
}

fn list_or_nothing(names: &[String]) -> String {
    if names.is_empty() {
        "nothing".into()
    } else {
        names.join(", ")
    }
}

/// The interface and version of a `vauban:plugin/NAME@VERSION` name.
fn vauban_interface(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(WIT_PACKAGE)?.strip_prefix('/')?;
    Some(rest.split_once('@').unwrap_or((rest, "")))
}

/// The WASI interfaces a sandboxed plugin may import: what Rust's standard
/// library and wit-bindgen guests import. The filesystem is linked but has
/// no preopened directory unless the config grants a read-only one; the
/// environment and arguments are empty; clocks are fixed; random is seeded.
const ALLOWED_WASI: [&str; 15] = [
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
];

fn check_import(import: &str, world: World) -> Result<(), ComponentProblem> {
    let bare = import.split_once('@').map_or(import, |(n, _)| n);
    let allowed = ALLOWED_WASI.contains(&bare)
        || bare.starts_with("wasi:cli/terminal-")
        // `types` carries only types; components import it to name them.
        || bare == "vauban:plugin/types"
        || (world.scores()
            && matches!(bare, "vauban:plugin/tensors" | "vauban:plugin/scoring"));
    if allowed {
        return Ok(());
    }
    let why = if bare.starts_with("wasi:sockets/") || bare.starts_with("wasi:http/") {
        "plugins have no network"
    } else if bare.starts_with("vauban:plugin/") {
        "that interface is not part of this plugin's world"
    } else {
        "only the WASI interfaces of a standard Rust guest are linked"
    };
    Err(ComponentProblem::ForbiddenImport {
        import: import.to_owned(),
        why,
    })
}

/// Top-level import and export names of a component.
fn names(bytes: &[u8]) -> Result<(Vec<String>, Vec<String>), ComponentProblem> {
    if bytes.is_empty() {
        return Err(ComponentProblem::NotAComponent("the file is empty".into()));
    }
    let bad =
        |e: wasmparser::BinaryReaderError| ComponentProblem::NotAComponent(e.message().to_owned());
    let mut imports = Vec::new();
    let mut exports = Vec::new();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(bad)? {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    return Err(ComponentProblem::NotAComponent(
                        "it is a core module".into(),
                    ));
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(r) if depth == 1 => {
                for i in r {
                    imports.push(i.map_err(bad)?.name.name.to_owned());
                }
            }
            Payload::ComponentExportSection(r) if depth == 1 => {
                for e in r {
                    exports.push(e.map_err(bad)?.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_are_checked_against_the_world() {
        assert!(check_import("wasi:io/streams@0.2.6", World::Scorer).is_ok());
        assert!(check_import("vauban:plugin/tensors@0.1.0", World::Scorer).is_ok());
        let e = check_import("vauban:plugin/tensors@0.1.0", World::ClaimMapper).unwrap_err();
        assert!(
            e.to_string().contains("not part of this plugin's world"),
            "{e}"
        );
        let e = check_import("wasi:sockets/tcp@0.2.6", World::Scorer).unwrap_err();
        assert!(e.to_string().contains("no network"), "{e}");
    }

    #[test]
    fn garbage_and_core_modules_are_not_components() {
        assert!(matches!(
            inspect(b"hello world, not wasm"),
            Err(ComponentProblem::NotAComponent(_))
        ));
        assert!(matches!(
            inspect(b""),
            Err(ComponentProblem::NotAComponent(_))
        ));
        // A minimal core module: magic and version 1.
        let core = b"\0asm\x01\0\0\0";
        let e = inspect(core).unwrap_err();
        assert!(e.to_string().contains("core module"), "{e}");
    }
}
