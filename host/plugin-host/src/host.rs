//! One [`PluginHost`] per process: the engine, the linkers, the epoch
//! ticker and the compile cache. A [`Plugin`] is a checked, compiled
//! component with its `InstancePre`; every job instantiates it afresh in a
//! new sandboxed store.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, InstancePre, Linker};
use wasmtime::{Config, Engine, Store, Trap};

use crate::hash::sha256_hex;

use super::component::{self, ComponentFacts, World};
use super::error::{Failure, PluginError};
use super::sandbox::{MemoryLimitHit, SandboxOptions, SandboxState};
use super::wit;

/// The largest component file loaded (first-party plugins are 0.2-0.3 MB).
pub const MAX_COMPONENT_BYTES: u64 = 64 << 20;

/// How often the epoch advances: the resolution of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// How the host is set up.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// Compiled plugins are cached here, keyed by the component's sha256
    /// and the engine's configuration. Only this host writes the directory,
    /// and only code it compiled itself is loaded from it. None: no cache.
    pub cache_dir: Option<PathBuf>,
    /// Meter instructions, so a sandbox may set `fuel` (slows every call).
    pub fuel_metering: bool,
}

impl HostOptions {
    /// The user's cache directory for vauban (`$XDG_CACHE_HOME/vauban/plugins`
    /// or `~/.cache/vauban/plugins`), if one can be named.
    pub fn default_cache_dir() -> Option<PathBuf> {
        vauban_format::hash::cache_root().map(|root| root.join("plugins"))
    }
}

pub struct PluginHost {
    engine: Engine,
    options: HostOptions,
    scorer_linker: Linker<SandboxState>,
    plain_linker: Linker<SandboxState>,
    // Held for its Drop, which stops the epoch thread.
    _ticker: Ticker,
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl PluginHost {
    pub fn new(options: HostOptions) -> Result<PluginHost, PluginError> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(options.fuel_metering)
            // No component-model async here: it made every call slower.
            .concurrency_support(false);
        let engine = Engine::new(&config).map_err(|e| PluginError::Sandbox(format!("{e:#}")))?;

        let mut plain_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut plain_linker)
            .map_err(|e| PluginError::Sandbox(format!("{e:#}")))?;
        // Clock waits on the sandbox's virtual clock, not by sleeping: the
        // epoch deadline cannot stop time spent in the host (sandbox.rs).
        plain_linker.allow_shadowing(true);
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<
            _,
            super::sandbox::VirtualClocks,
        >(&mut plain_linker, SandboxState::virtual_clock)
        .map_err(|e| PluginError::Sandbox(format!("{e:#}")))?;
        plain_linker.allow_shadowing(false);
        let mut scorer_linker = plain_linker.clone();
        // The `tensors` import of every WIT version the host runs.
        wit::current::scorer::vauban::plugin::tensors::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut scorer_linker, |s| s)
        .map_err(|e| PluginError::Sandbox(format!("{e:#}")))?;
        wit::since_v0_2_0::scorer::vauban::plugin::tensors::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut scorer_linker, |s| s)
        .map_err(|e| PluginError::Sandbox(format!("{e:#}")))?;
        wit::since_v0_1_0::scorer::vauban::plugin::tensors::add_to_linker::<
            _,
            wasmtime::component::HasSelf<_>,
        >(&mut scorer_linker, |s| s)
        .map_err(|e| PluginError::Sandbox(format!("{e:#}")))?;

        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("vauban-plugin-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| PluginError::Sandbox(format!("cannot start the epoch thread: {e}")))?
        };
        Ok(PluginHost {
            engine,
            options,
            scorer_linker,
            plain_linker,
            _ticker: Ticker {
                stop,
                thread: Some(thread),
            },
        })
    }

    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    /// Reads, checks and compiles a component (or loads this host's own
    /// compiled copy from the cache).
    pub fn load(&self, path: impl AsRef<Path>) -> Result<Plugin, PluginError> {
        let path = path.as_ref();
        // Bounded before it is read: a plugin file is untrusted, and what is
        // read is then compiled, in host time no call deadline covers.
        let bytes = crate::input::read_bounded(path, MAX_COMPONENT_BYTES).map_err(|e| {
            PluginError::Read {
                path: path.to_owned(),
                source: crate::input::io_error(e),
            }
        })?;
        self.load_bytes(path, &bytes)
    }

    /// [`PluginHost::load`] on bytes already read; `path` names them in errors.
    pub fn load_bytes(&self, path: &Path, bytes: &[u8]) -> Result<Plugin, PluginError> {
        let facts = component::inspect(bytes).map_err(|problem| PluginError::Refused {
            path: path.to_owned(),
            problem,
        })?;
        let sha256 = sha256_hex(bytes);
        let start = Instant::now();
        let (component, cached) = self.compile(path, bytes, &sha256)?;
        let compile_time = start.elapsed();
        let linker = match facts.world {
            World::Scorer | World::JudgedScorer => &self.scorer_linker,
            _ => &self.plain_linker,
        };
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| PluginError::Compile {
                path: path.to_owned(),
                message: format!("cannot link: {e:#}"),
            })?;
        tracing::debug!(plugin = %path.display(), ?compile_time, cached, "plugin loaded");
        Ok(Plugin {
            path: path.to_owned(),
            sha256,
            size: bytes.len() as u64,
            facts,
            pre,
            engine: self.engine.clone(),
            fuel_metering: self.options.fuel_metering,
            compile_time,
            cached,
        })
    }

    fn compile(
        &self,
        path: &Path,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<(Component, bool), PluginError> {
        let compile_err = |e: wasmtime::Error| PluginError::Compile {
            path: path.to_owned(),
            message: format!("{e:#}"),
        };
        let Some(dir) = &self.options.cache_dir else {
            return Ok((
                Component::new(&self.engine, bytes).map_err(compile_err)?,
                false,
            ));
        };
        let file = dir.join(format!("{sha256}-{}.cwasm", self.engine_key()));
        if file.is_file() {
            // SAFETY: the file is named by the source's sha256 and this
            // engine's configuration, and only `PluginHost::compile` writes
            // this directory (atomically, below): it is code this host
            // compiled from exactly these bytes.
            match unsafe { Component::deserialize_file(&self.engine, &file) } {
                Ok(c) => return Ok((c, true)),
                Err(e) => {
                    tracing::warn!(file = %file.display(), "ignoring an unusable cached plugin: {e:#}")
                }
            }
        }
        let compiled = self
            .engine
            .precompile_component(bytes)
            .map_err(compile_err)?;
        if let Err(e) = crate::atomic_file::write(&file, &compiled) {
            tracing::warn!(dir = %dir.display(), "cannot cache the compiled plugin: {e}");
        }
        // SAFETY: `compiled` was produced by this engine a moment ago.
        let c = unsafe { Component::deserialize(&self.engine, &compiled) }.map_err(compile_err)?;
        Ok((c, false))
    }

    /// A short hash of everything that makes compiled code valid for this
    /// engine (wasmtime version, target, settings).
    fn engine_key(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        format!("{:016x}", h.finish())
    }
}

/// A checked, compiled plugin, ready to instantiate.
pub struct Plugin {
    pub path: PathBuf,
    pub sha256: String,
    pub size: u64,
    pub facts: ComponentFacts,
    pub(crate) pre: InstancePre<SandboxState>,
    pub(crate) engine: Engine,
    fuel_metering: bool,
    /// Time to compile, or to load the cached compilation.
    pub compile_time: Duration,
    /// Whether the compiled code came from the cache.
    pub cached: bool,
}

impl Plugin {
    pub fn world(&self) -> World {
        self.facts.world
    }

    pub(crate) fn expect_world(&self, wanted: World) -> Result<(), PluginError> {
        if self.facts.world == wanted {
            Ok(())
        } else {
            Err(PluginError::WrongWorld {
                path: self.path.clone(),
                found: self.facts.world,
                wanted,
            })
        }
    }

    /// A fresh sandboxed store for one job.
    pub(crate) fn store(
        &self,
        sandbox: &SandboxOptions,
    ) -> Result<Store<SandboxState>, PluginError> {
        if sandbox.fuel.is_some() && !self.fuel_metering {
            return Err(PluginError::Sandbox(
                "the sandbox sets fuel, but this host was made without fuel metering".into(),
            ));
        }
        let state = SandboxState::new(sandbox).map_err(PluginError::Sandbox)?;
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.memory);
        store.epoch_deadline_trap();
        if self.fuel_metering && sandbox.fuel.is_none() {
            // Metering is on for the engine, but this sandbox sets no budget.
            store
                .set_fuel(u64::MAX)
                .map_err(|e| PluginError::Sandbox(format!("{e:#}")))?;
        }
        Ok(store)
    }
}

/// Arms the deadline (and fuel) for one call into the guest.
pub(crate) fn arm(
    store: &mut Store<SandboxState>,
    sandbox: &SandboxOptions,
) -> wasmtime::Result<()> {
    let ticks = sandbox
        .deadline
        .as_nanos()
        .div_ceil(EPOCH_TICK.as_nanos())
        .max(1) as u64;
    store.set_epoch_deadline(ticks);
    if let Some(fuel) = sandbox.fuel {
        store.set_fuel(fuel)?;
    }
    Ok(())
}

/// At most 4 KiB of a trap's text, cut on a character boundary.
fn bounded(mut text: String) -> String {
    if text.len() > 4096 {
        text.truncate(text.floor_char_boundary(4096));
        text.push_str(" [...]");
    }
    text
}

/// Turns what wasmtime returned into the typed failure.
pub(crate) fn classify(e: &wasmtime::Error, sandbox: &SandboxOptions) -> Failure {
    if e.downcast_ref::<MemoryLimitHit>().is_some() {
        return Failure::MemoryLimit {
            limit: sandbox.memory_bytes,
        };
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Failure::Timeout {
            deadline: sandbox.deadline,
        },
        Some(Trap::OutOfFuel) => Failure::OutOfFuel {
            fuel: sandbox.fuel.unwrap_or(0),
        },
        _ => {
            // The wasm backtrace is wasmtime's outermost context: keep it
            // apart, so the reason (and a guest's panic message) comes first.
            let backtrace = e.downcast_ref::<wasmtime::WasmBacktrace>().map(|b| {
                let text = b.to_string();
                // Its display opens with a heading the report gives itself.
                let frames = text
                    .trim_end()
                    .trim_start_matches("error while executing at wasm backtrace:");
                bounded(frames.trim_start_matches('\n').to_owned())
            });
            let skip = usize::from(backtrace.is_some());
            let causes: Vec<String> = e.chain().skip(skip).map(|c| c.to_string()).collect();
            let message = match causes.is_empty() {
                true => format!("{e:#}"),
                false => causes.join(": "),
            };
            Failure::Trap {
                message: bounded(message),
                backtrace,
            }
        }
    }
}
