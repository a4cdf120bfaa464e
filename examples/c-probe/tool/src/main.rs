//! Build helper for the C probe example (see ../build.sh).
//!
//! ```text
//! vigil-c-probe-tool bindgen WIT_DIR WORLD OUT_DIR
//!     C bindings of WORLD (e.g. `probe`) into OUT_DIR: WORLD.h, WORLD.c and
//!     WORLD_component_type.o (the world's type, linked into the module so
//!     the componentizer knows what it implements). Same output as
//!     `wit-bindgen c WIT_DIR --world WORLD --out-dir OUT_DIR`.
//!
//! vigil-c-probe-tool componentize CORE.wasm OUT.wasm
//!     Wraps a core module into a component, as
//!     `wasm-tools component new CORE.wasm --adapt wasi_snapshot_preview1=...`
//!     would: imports of `wasi_snapshot_preview1` (if any) are served by the
//!     reactor adapter that matches the `wasi-preview1-component-adapter-provider`
//!     crate's version.
//! ```

use std::fs;
use std::path::Path;

use anyhow::{Context, Result, bail};
use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_bindgen_core::Files;
use wit_component::ComponentEncoder;
use wit_parser::Resolve;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["bindgen", wit_dir, world, out_dir] => bindgen(wit_dir, world, out_dir),
        ["componentize", core, out] => componentize(core, out),
        _ => bail!(
            "usage:\n  vigil-c-probe-tool bindgen WIT_DIR WORLD OUT_DIR\n  \
             vigil-c-probe-tool componentize CORE.wasm OUT.wasm"
        ),
    }
}

fn bindgen(wit_dir: &str, world: &str, out_dir: &str) -> Result<()> {
    let mut resolve = Resolve::default();
    // push_dir also loads the packages under WIT_DIR/deps (WASI here).
    let (pkg, _) = resolve
        .push_dir(wit_dir)
        .with_context(|| format!("parsing the WIT package in {wit_dir}"))?;
    let world_id = resolve.select_world(&[pkg], Some(world))?;

    let mut files = Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world_id, &mut files)?;

    fs::create_dir_all(out_dir).with_context(|| format!("creating {out_dir}"))?;
    for (name, contents) in files.iter() {
        let path = Path::new(out_dir).join(name);
        fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

fn componentize(core: &str, out: &str) -> Result<()> {
    let module = fs::read(core).with_context(|| format!("reading {core}"))?;
    let component = ComponentEncoder::default()
        .module(&module)
        .context("reading the component type embedded in the module")?
        .validate(true)
        // Used only if the module imports wasi_snapshot_preview1 (wasi-libc
        // does for I/O, clocks, random...); otherwise it is left out.
        .adapter(
            WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )?
        .encode()
        .context("encoding the component")?;
    fs::write(out, &component).with_context(|| format!("writing {out}"))?;
    println!("{out} ({} bytes)", component.len());
    Ok(())
}
