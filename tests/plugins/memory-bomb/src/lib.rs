//! Hostile probe: `check` allocates memory 1 MiB at a time, touching every
//! page and keeping every chunk alive, until an allocation fails. Then it
//! aborts (a trap): only the host's memory cap bounds it.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::types::Report;

const MIB: usize = 1024 * 1024;

struct MemoryBomb;

impl Guest for MemoryBomb {
    fn check() -> Report {
        // Room for 4096 chunk pointers (= the whole 4 GiB wasm32 address
        // space) up front, so growing this list is not what fails first.
        let mut chunks: Vec<Vec<u8>> = Vec::with_capacity(4096);
        loop {
            let mut chunk: Vec<u8> = Vec::new();
            if chunk.try_reserve_exact(MIB).is_err() {
                // The expected end: `memory.grow` was refused.
                panic!("memory-bomb: allocation failed after {} MiB", chunks.len());
            }
            // Write every byte (non-zero) so the memory is really used.
            chunk.resize(MIB, 0xA5);
            // Keep the chunk (and its writes) alive and observable.
            chunks.push(std::hint::black_box(chunk));
        }
    }
}

export!(MemoryBomb);
