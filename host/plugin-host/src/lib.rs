//! The WebAssembly plugin host.
//!
//! Scorers, intervention policies and claim mappers are components of the
//! `vauban:plugin` WIT package (`wit/plugin.wit`). Loading one reads its
//! declared world, WIT version and imports before compiling anything
//! ([`component`]); every job runs in a fresh sandboxed store ([`sandbox`]);
//! anything a plugin does wrong becomes a [`PluginError`] and the host goes
//! on.

use vauban_format::{atomic_file, bundle, hash, input, intervention, trace};

pub mod claims;
pub mod component;
mod error;
mod host;
pub mod policy;
pub mod sandbox;
pub mod scorer;
pub mod tensors;
mod wit;

pub use claims::ClaimMapper;
pub use component::{ComponentFacts, WIT_PACKAGE, WIT_VERSION, World};
pub use error::{Failure, GuestErrorKind, PluginError};
pub use host::{EPOCH_TICK, HostOptions, Plugin, PluginHost};
pub use policy::Policy;
pub use sandbox::SandboxOptions;
pub use scorer::Scorer;

use wasmtime::Store;

use sandbox::SandboxState;

/// One call into a guest: arms the deadline, runs `f`, and turns a trap,
/// timeout or memory refusal into a [`PluginError`] with the plugin's
/// captured stderr.
fn call<T>(
    plugin: &str,
    name: &'static str,
    store: &mut Store<SandboxState>,
    sandbox: &SandboxOptions,
    f: impl FnOnce(&mut Store<SandboxState>) -> wasmtime::Result<T>,
) -> Result<T, PluginError> {
    let r = host::arm(store, sandbox).and_then(|()| f(store));
    r.map_err(|e| PluginError::Call {
        plugin: plugin.to_owned(),
        call: name,
        failure: host::classify(&e, sandbox),
        stderr: store.data().stderr.contents(),
    })
}

/// One live instance in its own sandboxed store. Every call goes through
/// [`call`]; after any failure the instance is never entered again.
struct Live<I> {
    plugin: String,
    sandbox: SandboxOptions,
    store: Store<SandboxState>,
    instance: I,
    poisoned: bool,
}

impl<I> Live<I> {
    /// A fresh store for `plugin` (named `name` in errors), instantiated.
    fn start(
        plugin: &Plugin,
        name: &str,
        sandbox: &SandboxOptions,
        instantiate: impl FnOnce(&mut Store<SandboxState>) -> wasmtime::Result<I>,
    ) -> Result<Live<I>, PluginError> {
        let mut store = plugin.store(sandbox)?;
        let instance = call(name, "instantiate", &mut store, sandbox, instantiate)?;
        Ok(Live {
            plugin: name.to_owned(),
            sandbox: sandbox.clone(),
            store,
            instance,
            poisoned: false,
        })
    }

    /// Calls into the guest, unless an earlier call failed.
    fn call<T>(
        &mut self,
        name: &'static str,
        f: impl FnOnce(&mut Store<SandboxState>, &I) -> wasmtime::Result<T>,
    ) -> Result<T, PluginError> {
        if self.poisoned {
            return Err(PluginError::Call {
                plugin: self.plugin.clone(),
                call: name,
                failure: Failure::Poisoned,
                stderr: String::new(),
            });
        }
        let instance = &self.instance;
        let r = call(&self.plugin, name, &mut self.store, &self.sandbox, |s| {
            f(s, instance)
        });
        self.poisoned |= r.is_err();
        r
    }

    /// [`Live::call`] for entry points returning `result<_, plugin-error>`:
    /// the plugin's own error becomes a [`Failure::Plugin`].
    fn call_checked<T, E: Into<GuestError>>(
        &mut self,
        name: &'static str,
        f: impl FnOnce(&mut Store<SandboxState>, &I) -> wasmtime::Result<Result<T, E>>,
    ) -> Result<T, PluginError> {
        let r = self.call(name, f)?;
        r.map_err(|e| self.fail(name, guest_failure(e.into())))
    }

    /// The error for a call whose result the host refuses; poisons the instance.
    fn fail(&mut self, call: &'static str, failure: Failure) -> PluginError {
        self.poisoned = true;
        PluginError::Call {
            plugin: self.plugin.clone(),
            call,
            failure,
            stderr: self.store.data().stderr.contents(),
        }
    }
}

/// A world's typed `InstancePre`, or the compile error naming the plugin.
fn typed_pre<P>(
    plugin: &Plugin,
    make: impl FnOnce(wasmtime::component::InstancePre<SandboxState>) -> wasmtime::Result<P>,
) -> Result<P, PluginError> {
    make(plugin.pre.clone()).map_err(|e| PluginError::Compile {
        path: plugin.path.clone(),
        message: format!("{e:#}"),
    })
}

/// The name a plugin goes by before it has described itself.
fn provisional_info(plugin: &Plugin) -> scorer::PluginInfo {
    scorer::PluginInfo {
        name: plugin.path.display().to_string(),
        version: String::new(),
        description: String::new(),
    }
}

/// The plugin's own error, whichever world's bindings it came from.
struct GuestError(GuestErrorKind, String);

fn guest_failure(e: GuestError) -> Failure {
    let GuestError(kind, mut message) = e;
    if message.len() > 4096 {
        message.truncate(message.floor_char_boundary(4096));
        message.push_str(" [...]");
    }
    Failure::Plugin { kind, message }
}

macro_rules! guest_error_from {
    ($($path:path),*) => {$(
        impl From<$path> for GuestError {
            fn from(e: $path) -> GuestError {
                use $path as E;
                match e {
                    E::BadConfig(m) => GuestError(GuestErrorKind::BadConfig, m),
                    E::Unsupported(m) => GuestError(GuestErrorKind::Unsupported, m),
                    E::Failed(m) => GuestError(GuestErrorKind::Failed, m),
                }
            }
        }
    )*};
}

macro_rules! plugin_info_from {
    ($($path:path),*) => {$(
        impl From<$path> for scorer::PluginInfo {
            fn from(i: $path) -> scorer::PluginInfo {
                scorer::PluginInfo { name: i.name, version: i.version, description: i.description }
            }
        }
    )*};
}

plugin_info_from!(
    wit::current::scorer::vauban::plugin::types::PluginInfo,
    wit::current::policy::vauban::plugin::types::PluginInfo,
    wit::current::claims::vauban::plugin::types::PluginInfo
);

guest_error_from!(
    wit::current::scorer::vauban::plugin::types::PluginError,
    wit::current::policy::vauban::plugin::types::PluginError,
    wit::current::claims::vauban::plugin::types::PluginError
);

/// Bounds on what a plugin says about itself.
fn check_info(info: &scorer::PluginInfo) -> Result<(), String> {
    let name_ok = !info.name.is_empty()
        && info.name.len() <= 64
        && info
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !name_ok {
        return Err(format!(
            "plugin name {:?} is not 1-64 characters of letters, digits, '-', '_' and '.'",
            &info.name[..info.name.floor_char_boundary(80)]
        ));
    }
    if info.version.is_empty() || info.version.len() > 64 {
        return Err("plugin version must be 1-64 characters".into());
    }
    if info.description.len() > 2048 {
        return Err("plugin description is over 2048 bytes".into());
    }
    Ok(())
}

/// The world names `describe` and golden files use.
impl<'de> serde::Deserialize<'de> for World {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<World, D::Error> {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        match s.as_str() {
            "scorer" => Ok(World::Scorer),
            "judged-scorer" => Ok(World::JudgedScorer),
            "intervention-policy" => Ok(World::InterventionPolicy),
            "claim-mapper" => Ok(World::ClaimMapper),
            _ => Err(serde::de::Error::custom(format!(
                "unknown world {s:?}; one of scorer, judged-scorer, intervention-policy, claim-mapper"
            ))),
        }
    }
}
