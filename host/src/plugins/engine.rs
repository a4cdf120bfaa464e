//! The one wasmtime [`Engine`] all plugins run on, its epoch ticker, and the
//! on-disk cache of compiled plugins.
//!
//! Why these settings:
//! - **Pooling allocator** with a bounded `memory_reservation` (the most a
//!   manifest may grant, 256 MiB) and a small guard: instance slots are
//!   reserved once, so a call's fresh instance costs microseconds, and many
//!   plugins fit in modest address space.
//! - **Epoch interruption**: a ticker thread advances the epoch every
//!   [`TICK`]; at each tick the call's deadline is checked
//!   ([`super::sandbox::store`]), so a busy loop is cut within one tick of
//!   its deadline.
//! - **Fuel**, only to yield: guest code yields every [`YIELD_FUEL`]
//!   instructions ([`super::sandbox::store`]). That bounds how long one
//!   poll of a call runs guest code (tens of microseconds), which lets the
//!   first poll run on the caller's thread ([`super::runner`]) and makes a
//!   busy plugin share its plugin thread.
//! - **Slots reset in place** ([`KEEP_RESIDENT`]): a slot's dirty pages are
//!   reset with `memset` rather than returned and faulted in again, which
//!   takes a trivial call from about 50 to about 16 µs.
//! - **Slots for [`MAX_INSTANCES`] calls at once**, each with at most
//!   [`limiter::MAX_MEMORIES`] memories and [`limiter::MAX_TABLES`] tables
//!   (a component declaring more is refused at load, see
//!   [`check_resources`]). Reserving a slot is address space, not memory:
//!   the pool's reservation grows with it, its resident size does not.
//! - **Compiled-code cache**: compiling a component takes from milliseconds
//!   (Rust) to seconds (an interpreter inside, like componentize-py); the
//!   artifact is kept under `DIR/ENGINE-HASH/CONTENT-SHA256.cwasm` so a
//!   restart of Vigil does not compile again.
//!
//! The cache is trusted code: wasmtime loads an artifact as machine code
//! without compiling or verifying it again, so whoever can write the cache
//! runs code in Vigil. Vigil creates its directories 0700 and files 0600
//! (whatever the umask) and uses only what is private to its user
//! ([`crate::private_fs`], [`Loose::Refuse`]): a cache directory another
//! user owns or that group or others can write is not used at all, and the
//! plugins are compiled in memory at every start instead, with an ERROR
//! naming the path and the fix (the gateway and its plugins keep running,
//! only slower to load); such a cached file is not loaded but compiled
//! again and replaced by a private one.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::limiter;
use super::manifest::MAX_MEMORY;
use crate::private_fs::{self, Kind, Loose};

/// How often the epoch advances.
pub const TICK: Duration = Duration::from_millis(10);

/// Guest instructions (fuel units, about one per wasm instruction) between
/// two yields of a call: some tens of microseconds of guest code. A trivial
/// probe (instantiate, read its config, report) needs a small fraction.
pub const YIELD_FUEL: u64 = 100_000;

/// Per memory slot, how much of what a call dirtied stays resident for the
/// next call (reset in place rather than returned to the kernel). What a
/// call dirtied beyond it is returned. Together with [`WARM_SLOTS`] this
/// bounds what plugins keep resident between calls: at most (calls at once
/// + `WARM_SLOTS`) × `KEEP_RESIDENT`, and only what calls really touched.
pub const KEEP_RESIDENT: usize = 1 << 20;
/// The same for a table slot.
pub const KEEP_RESIDENT_TABLE: usize = 64 << 10;
/// Idle slots kept warm for the module that used them last (instantiating
/// into a warm slot reuses its memory image): enough for the plugins a
/// gateway typically runs, few enough to bound what stays resident.
pub const WARM_SLOTS: u32 = 16;

/// Most plugin calls alive at once (each call has its own instance).
/// Admission ([`super::admission`]) keeps calls within it: a call beyond
/// waits for a slot instead of failing.
pub const MAX_INSTANCES: u32 = 256;

pub struct PluginEngine {
    engine: Engine,
    cache: Option<PathBuf>,
    stop: Arc<AtomicBool>,
}

impl PluginEngine {
    /// An engine caching compiled plugins under `cache` (none: compile every
    /// load). A cache directory that is not private to Vigil's user is not
    /// used (an ERROR says why and how to fix it); one that does not exist
    /// is created 0700.
    pub fn new(cache: Option<PathBuf>) -> Result<Self, String> {
        let mut pool = PoolingAllocationConfig::default();
        let memories = limiter::MAX_MEMORIES as u32;
        pool.total_component_instances(MAX_INSTANCES)
            .total_core_instances(MAX_INSTANCES * 16)
            .total_memories(MAX_INSTANCES * memories)
            .total_tables(MAX_INSTANCES * 16)
            .total_stacks(MAX_INSTANCES)
            .max_core_instances_per_component(limiter::MAX_INSTANCES as u32)
            .max_memories_per_component(memories)
            .max_tables_per_component(limiter::MAX_TABLES as u32)
            .max_tables_per_module(8)
            .table_elements(100_000)
            .max_memory_size(MAX_MEMORY as usize)
            // Interpreters inside components (componentize-py) have large
            // instance states.
            .max_component_instance_size(4 << 20)
            .max_core_instance_size(4 << 20);
        // A call's instance is torn down when it ends. By default that
        // gives its pages back (madvise), and on a multi-threaded process
        // every such call costs a TLB shootdown across the CPUs and the
        // next call page-faults them in again: 2/3 of a trivial call's
        // 50 µs. Instead, up to KEEP_RESIDENT of what the call dirtied is
        // found (PAGEMAP_SCAN, Linux 6.7+) and reset in place.
        pool.pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT_TABLE)
            .max_unused_warm_slots(WARM_SLOTS);
        let mut c = Config::new();
        c.wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(true)
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
            cache: cache.filter(|dir| usable_cache(dir)),
            stop,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The component in `bytes`, from the cache when compiled before.
    /// `Ok((component, from_cache))`.
    pub fn compile(&self, bytes: &[u8]) -> Result<(Component, bool), String> {
        let cached = self.cache_path(bytes).filter(|path| private_parent(path));
        if let Some(path) = &cached
            && trusted_file(path)
        {
            // SAFETY: the file was written by `Component::serialize` of an
            // engine with the same compatibility hash (part of the path), and
            // it and its directories are private to Vigil's user (checked
            // just above: owned by it or root, writable by no one else);
            // wasmtime checks the header and the engine settings again and
            // refuses a mismatch.
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

/// Whether the cache directory `dir` may be used, creating it (0700) when
/// absent; when not, the ERROR says why and how to fix it.
fn usable_cache(dir: &Path) -> bool {
    match private_fs::dir(dir, Loose::Refuse) {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(
                path = %e.path().display(),
                "the compiled-plugin cache is not used: {e}; until then every plugin is compiled in memory at each start (slower)"
            );
            false
        }
    }
}

/// Whether the engine's directory holding `path` (`DIR/ENGINE-HASH`) is
/// private, creating it (0700) when absent. Checked at every use: it is
/// where the artifacts are.
fn private_parent(path: &Path) -> bool {
    let Some(dir) = path.parent() else {
        return false;
    };
    match private_fs::dir(dir, Loose::Refuse) {
        Ok(_) => true,
        Err(e) => {
            tracing::error!(
                path = %e.path().display(),
                "the compiled-plugin cache is not used: {e}; until then this plugin is compiled in memory (slower)"
            );
            false
        }
    }
}

/// Whether the cached artifact at `path` exists and may be loaded. One that
/// group or others can write (or another user owns) is not loaded; it is
/// compiled again and replaced by a private one.
fn trusted_file(path: &Path) -> bool {
    match private_fs::existing(path, Kind::File, Loose::Refuse) {
        Ok(found) => found.is_some(),
        Err(e) => {
            tracing::warn!(
                path = %path.display(),
                "compiled plugin not loaded from the cache: {e}; compiling it again and replacing the cached copy"
            );
            false
        }
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Writes the artifact privately (0600) into its directory, which
/// [`private_parent`] created.
fn write_cache(path: &Path, component: &Component) -> std::io::Result<()> {
    let bytes = component.serialize().map_err(std::io::Error::other)?;
    // Write then rename: a crash never leaves half a file to deserialize,
    // and a refused file is replaced, not written into.
    let tmp = path.with_extension("cwasm.tmp");
    private_fs::write(&tmp, &bytes)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private_fs::tests::{TempDir, mode_of, set};

    /// The smallest valid component: the preamble alone.
    const EMPTY_COMPONENT: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

    fn cwasm_files(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for sub in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(sub.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                out.push(f.path());
            }
        }
        out
    }

    #[test]
    fn a_private_cache_is_created_0700_and_used() {
        let tmp = TempDir::new("cache-ok");
        let cache = tmp.path().join("plugin-cache");
        let engine = PluginEngine::new(Some(cache.clone())).unwrap();
        assert_eq!(mode_of(&cache), 0o700);
        assert!(!engine.compile(&EMPTY_COMPONENT).unwrap().1);
        let [file] = &cwasm_files(&cache)[..] else {
            panic!("one artifact: {:?}", cwasm_files(&cache))
        };
        assert_eq!(mode_of(file), 0o600);
        assert_eq!(mode_of(file.parent().unwrap()), 0o700);
        assert!(
            engine.compile(&EMPTY_COMPONENT).unwrap().1,
            "loaded from the cache"
        );
    }

    /// Issue 12 item 13: a cache others can write is code execution in
    /// Vigil. It is not used; plugins still compile, in memory.
    #[test]
    fn a_cache_others_can_write_is_not_used() {
        let tmp = TempDir::new("cache-open");
        let cache = tmp.path().join("plugin-cache");
        std::fs::create_dir(&cache).unwrap();
        set(&cache, 0o777);
        let engine = PluginEngine::new(Some(cache.clone())).unwrap();
        assert!(!engine.compile(&EMPTY_COMPONENT).unwrap().1);
        assert!(
            !engine.compile(&EMPTY_COMPONENT).unwrap().1,
            "never from the cache"
        );
        assert!(cwasm_files(&cache).is_empty(), "nothing written into it");
        assert_eq!(mode_of(&cache), 0o777, "refused, not tightened");
    }

    #[test]
    fn a_cached_file_others_can_write_is_compiled_again_and_replaced() {
        let tmp = TempDir::new("cache-file");
        let cache = tmp.path().join("plugin-cache");
        let engine = PluginEngine::new(Some(cache.clone())).unwrap();
        engine.compile(&EMPTY_COMPONENT).unwrap();
        let [file] = &cwasm_files(&cache)[..] else {
            panic!("one artifact")
        };
        set(file, 0o666);
        assert!(!engine.compile(&EMPTY_COMPONENT).unwrap().1, "not loaded");
        assert_eq!(mode_of(file), 0o600, "replaced by a private copy");
        assert!(engine.compile(&EMPTY_COMPONENT).unwrap().1);

        set(file.parent().unwrap(), 0o777);
        assert!(
            !engine.compile(&EMPTY_COMPONENT).unwrap().1,
            "its directory is open"
        );
    }
}
