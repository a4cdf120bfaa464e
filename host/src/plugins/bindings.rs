//! Host bindings of the two worlds, generated from `wit/plugin.wit`.
//!
//! WASI types come from wasmtime-wasi and wasmtime-wasi-http (`with`), so
//! their linker implementations serve the plugins; the notifier world
//! reuses the probe world's `host` and `types` interfaces.

pub mod probe {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "vigil:plugin/probe",
        imports: { default: async },
        exports: { default: async },
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        },
    });
}

pub mod notifier {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "vigil:plugin/notifier",
        imports: { default: async },
        exports: { default: async },
        with: {
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "vigil:plugin/host": super::probe::vigil::plugin::host,
            "vigil:plugin/types": super::probe::vigil::plugin::types,
        },
    });
}
