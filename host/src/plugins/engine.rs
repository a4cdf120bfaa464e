//! The one wasmtime [`Engine`] all plugins run on, its epoch ticker, and the
//! on-disk cache of compiled plugins.
//!
//! Why these settings:
//! - **Pooling allocator** with a bounded `memory_reservation` (the most a
//!   manifest may grant, 256 MiB) and a small guard: instance slots are
//!   reserved once, so a call's fresh instance costs microseconds, and many
//!   plugins fit in modest address space.
//! - **Epoch interruption**: a ticker thread advances the epoch every
//!   [`TICK`]; each call's store gets a deadline in ticks and traps when it
//!   passes, so a busy loop is cut within one tick of its deadline.
//! - **Compiled-code cache**: compiling a component takes from milliseconds
//!   (Rust) to seconds (an interpreter inside, like componentize-py); the
//!   artifact is kept under `DIR/ENGINE-HASH/CONTENT-SHA256.cwasm` so a
//!   restart of Vigil does not compile again.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::manifest::MAX_MEMORY;

/// How often the epoch advances.
pub const TICK: Duration = Duration::from_millis(10);

/// Most plugin instances alive at once (each call has its own).
pub const MAX_INSTANCES: u32 = 64;

pub struct PluginEngine {
    engine: Engine,
    cache: Option<PathBuf>,
    stop: Arc<AtomicBool>,
}

impl PluginEngine {
    /// An engine caching compiled plugins under `cache` (none: compile every
    /// load).
    pub fn new(cache: Option<PathBuf>) -> Result<Self, String> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(MAX_INSTANCES)
            .total_core_instances(MAX_INSTANCES * 16)
            .total_memories(MAX_INSTANCES * 2)
            .total_tables(MAX_INSTANCES * 16)
            .total_stacks(MAX_INSTANCES)
            .max_core_instances_per_component(32)
            .max_memories_per_component(4)
            .max_tables_per_component(32)
            .max_tables_per_module(8)
            .table_elements(100_000)
            .max_memory_size(MAX_MEMORY as usize)
            // Interpreters inside components (componentize-py) have large
            // instance states.
            .max_component_instance_size(4 << 20)
            .max_core_instance_size(4 << 20);
        let mut c = Config::new();
        c.wasm_component_model(true)
            .epoch_interruption(true)
            .memory_reservation(MAX_MEMORY)
            .memory_guard_size(64 << 10)
            .memory_reservation_for_growth(0)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine =
            Engine::new(&c).map_err(|e| format!("cannot start the plugin engine: {e:#}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (weak, flag) = (engine.weak(), stop.clone());
        std::thread::Builder::new()
            .name("vigil-plugin-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(TICK);
                    match weak.upgrade() {
                        Some(e) => e.increment_epoch(),
                        None => return,
                    }
                }
            })
            .map_err(|e| format!("cannot start the plugin epoch ticker: {e}"))?;
        Ok(Self {
            engine,
            cache,
            stop,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Epoch ticks for a deadline (at least one).
    pub fn ticks(deadline: Duration) -> u64 {
        (deadline.as_millis() / TICK.as_millis()).max(1) as u64 + 1
    }

    /// The component in `bytes`, from the cache when compiled before.
    /// `Ok((component, from_cache))`.
    pub fn compile(&self, bytes: &[u8]) -> Result<(Component, bool), String> {
        let cached = self.cache_path(bytes);
        if let Some(path) = &cached
            && path.exists()
        {
            // SAFETY: the file was written by `Component::serialize` of an
            // engine with the same compatibility hash (part of the path) in
            // a directory only Vigil writes; wasmtime checks the header and
            // the engine settings again and refuses a mismatch.
            match unsafe { Component::deserialize_file(&self.engine, path) } {
                Ok(c) => return Ok((c, true)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "compiled plugin in the cache is unusable; compiling again");
                }
            }
        }
        let component =
            Component::new(&self.engine, bytes).map_err(|e| describe_compile_error(bytes, &e))?;
        if let Some(path) = cached
            && let Err(e) = write_cache(&path, &component)
        {
            tracing::warn!(path = %path.display(), error = %e, "could not cache the compiled plugin");
        }
        Ok((component, false))
    }

    fn cache_path(&self, bytes: &[u8]) -> Option<PathBuf> {
        let dir = self.cache.as_ref()?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        let engine = format!("{:016x}", h.finish());
        let content = hex::encode(Sha256::digest(bytes));
        Some(dir.join(engine).join(format!("{content}.cwasm")))
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn write_cache(path: &Path, component: &Component) -> std::io::Result<()> {
    let bytes = component.serialize().map_err(std::io::Error::other)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // Write then rename: a crash never leaves half a file to deserialize.
    let tmp = path.with_extension("cwasm.tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// What to tell an operator about bytes that did not compile.
fn describe_compile_error(bytes: &[u8], e: &wasmtime::Error) -> String {
    const MAGIC: [u8; 4] = *b"\0asm";
    if bytes.len() < 8 || bytes[..4] != MAGIC {
        return "not a WebAssembly file (bad magic number): is it a corrupt or truncated download?"
            .into();
    }
    if bytes[4..8] == [1, 0, 0, 0] {
        return "a core WebAssembly module, not a component: build it for wasm32-wasip2 (or wrap it with `wasm-tools component new`)".into();
    }
    format!("not a valid WebAssembly component: {e:#}")
}
