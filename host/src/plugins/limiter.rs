//! One call's memory budget: `limits.memory` is what the whole call may
//! hold in linear memories and tables together, however many of each the
//! component declares (wasmtime's own `StoreLimits` caps each memory on its
//! own: a component with four memories got four times its cap).
//!
//! A growth past the budget traps with [`MemoryLimit`] (a plugin that
//! cannot get memory has no sensible way on), and the hit goes to the
//! call's [`HitRecord`] like every other limit.

use std::sync::Arc;

use wasmtime::{ResourceLimiter, Result};

use super::sandbox::HitRecord;

/// Most linear memories one component may have (the main memory, and one
/// more for a component that links two libraries apart).
pub const MAX_MEMORIES: usize = 2;
/// Most tables one component may have (function tables of its modules,
/// adapters included: componentize-py needs about a dozen).
pub const MAX_TABLES: usize = 32;
/// Most core instances one component may create.
pub const MAX_INSTANCES: usize = 64;
/// What one table element costs the host (a pointer).
const TABLE_ELEMENT: usize = std::mem::size_of::<usize>();

/// The trap of a growth the budget refused: what the call's error says.
#[derive(Debug, thiserror::Error)]
#[error("ran out of its memory limit: {0}")]
pub struct MemoryLimit(pub String);

/// The memory budget of one call.
#[derive(Debug)]
pub struct Limiter {
    cap: usize,
    used: usize,
    /// What the growth in progress added (taken back if it then fails).
    pending: usize,
    hits: Arc<HitRecord>,
}

impl Limiter {
    /// A budget of `cap` bytes, reporting to `hits`.
    pub fn new(cap: usize, hits: Arc<HitRecord>) -> Self {
        Self {
            cap,
            used: 0,
            pending: 0,
            hits,
        }
    }

    /// Bytes held now, memories and tables together.
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used
    }

    /// Grants `add` more bytes of a `what`, unless that passes the
    /// module's own maximum (a plain failed grow, as wasm says) or the
    /// budget (a trap).
    fn grow(&mut self, what: &str, add: usize, past_maximum: bool) -> Result<bool> {
        if past_maximum {
            return Ok(false);
        }
        let total = self.used.saturating_add(add);
        if total > self.cap {
            let detail = format!(
                "growing a {what} to {} in all would pass its memory limit of {} (memories and tables together)",
                show(total),
                show(self.cap)
            );
            self.hits.hit("limits.memory", detail.clone());
            return Err(wasmtime::Error::new(MemoryLimit(detail)));
        }
        self.used = total;
        self.pending = add;
        Ok(true)
    }

    fn failed(&mut self, error: wasmtime::Error) -> Result<()> {
        self.used -= std::mem::take(&mut self.pending);
        Err(error.context("ran out of memory: the host could not grow it"))
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool> {
        self.grow(
            "memory",
            desired.saturating_sub(current),
            maximum.is_some_and(|m| desired > m),
        )
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> Result<()> {
        self.failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool> {
        self.grow(
            "table",
            desired
                .saturating_sub(current)
                .saturating_mul(TABLE_ELEMENT),
            maximum.is_some_and(|m| desired > m),
        )
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> Result<()> {
        self.failed(error)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// Refuses, at load, a component that could never run within the limits:
/// more memories or tables than a call may have, or a memory that starts
/// larger than `cap` (`limits.memory`). Without this such a plugin would
/// only fail at its first call, and every call after.
pub fn check(
    component: &wasmtime::component::Component,
    cap: u64,
) -> std::result::Result<(), String> {
    let Some(r) = component.resources_required() else {
        return Err("it imports core modules, which Vigil does not provide".into());
    };
    if r.num_memories as usize > MAX_MEMORIES {
        return Err(format!(
            "it has {} linear memories; a plugin may have at most {MAX_MEMORIES}",
            r.num_memories
        ));
    }
    if r.num_tables as usize > MAX_TABLES {
        return Err(format!(
            "it has {} tables; a plugin may have at most {MAX_TABLES}",
            r.num_tables
        ));
    }
    let initial = r
        .max_initial_memory_size
        .unwrap_or(0)
        .saturating_mul(64 << 10);
    if initial > cap {
        return Err(format!(
            "one of its memories starts at {} but its memory limit is {}: raise `[limits] memory` in its manifest",
            show(initial as usize),
            show(cap as usize)
        ));
    }
    Ok(())
}

fn show(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes.div_ceil(1 << 10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn the_cap_is_the_total_of_every_memory() {
        let mut l = Limiter::new(16 * MIB, HitRecord::new("p".into()));
        assert!(l.memory_growing(0, 8 * MIB, None).unwrap(), "first memory");
        assert!(l.memory_growing(0, 8 * MIB, None).unwrap(), "second memory");
        let e = l.memory_growing(0, 64 << 10, None).unwrap_err().to_string();
        assert!(e.contains("memory limit of 16 MiB"), "{e}");
        assert_eq!(l.hits.take().map(|h| h.key), Some("limits.memory"));
        assert_eq!(l.used(), 16 * MIB);
    }

    #[test]
    fn tables_count_against_the_same_budget() {
        let mut l = Limiter::new(MIB, HitRecord::new("p".into()));
        assert!(l.table_growing(0, 1000, None).unwrap());
        assert_eq!(l.used(), 1000 * TABLE_ELEMENT);
        assert!(
            l.memory_growing(0, MIB, None).is_err(),
            "the table's bytes are taken"
        );
    }

    #[test]
    fn a_failed_growth_gives_its_bytes_back() {
        let mut l = Limiter::new(MIB, HitRecord::new("p".into()));
        assert!(l.memory_growing(0, 512 << 10, None).unwrap());
        assert!(l.memory_grow_failed(wasmtime::format_err!("mmap")).is_err());
        assert_eq!(l.used(), 0);
    }

    #[test]
    fn a_module_maximum_fails_the_grow_without_a_trap() {
        let mut l = Limiter::new(MIB, HitRecord::new("p".into()));
        assert!(!l.memory_growing(0, 128 << 10, Some(64 << 10)).unwrap());
        assert!(l.hits.take().is_none());
    }
}
