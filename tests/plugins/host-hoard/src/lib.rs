//! Hostile probe: `check` makes the host hold memory outside the plugin's
//! own cap. It creates `wasi:http` `fields` (header maps) one after another,
//! fills each with as many 4 KiB header values as the host lets in, and
//! keeps every one alive; then outgoing requests whose bodies it fills up to
//! what the host buffers. All of that lives in Vigil, not in the plugin's
//! linear memory: the first round measured +414 MiB in a 1 s call with a
//! 16 MiB `limits.memory`.
//!
//! What must stop it: the byte bounds of each resource (a header map over
//! the host's per-map size traps: the default 120 KiB does) and, for maps
//! under that bound (`map_kib = 12`), the host's cap on resources per call
//! (`limits.host_resources`). It reports `unknown` with what it managed if the host refused
//! something without trapping; a trap ends the call, which is the expected
//! end.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "probe",
    generate_all,
});

use exports::vigil::plugin::prober::Guest;
use vigil::plugin::types::{Report, Status};
use wasi::http::types::{Fields, Method, OutgoingRequest};

struct HostHoard;

impl Guest for HostHoard {
    fn check() -> Report {
        let value = vec![b'x'; 4096];
        let map_kib: u32 = vigil::plugin::host::config()
            .into_iter()
            .find(|(k, _)| k == "map_kib")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(120);
        let mut kept_fields = Vec::new();
        let mut header_bytes: u64 = 0;
        let mut kept_requests = Vec::new();
        for round in 0..1_000_000u32 {
            let fields = Fields::new();
            for i in 0..map_kib / 4 {
                if fields.append(&format!("x-hoard-{i}"), &value).is_err() {
                    break;
                }
                header_bytes += value.len() as u64;
            }
            kept_fields.push(fields);
            // Every fourth round, a request with a body filled to the brim.
            if round % 4 == 0 {
                let request = OutgoingRequest::new(Fields::new());
                let _ = request.set_method(&Method::Post);
                if let Ok(body) = request.body() {
                    if let Ok(stream) = body.write() {
                        while let Ok(n) = stream.check_write() {
                            if n == 0 || stream.write(&vec![0u8; n.min(1 << 20) as usize]).is_err() {
                                break;
                            }
                        }
                        kept_requests.push((request, body, stream));
                    }
                }
            }
        }
        Report {
            status: Status::Unknown(format!(
                "host-hoard: nothing stopped it: {} fields ({header_bytes} header bytes), {} requests",
                kept_fields.len(),
                kept_requests.len()
            )),
            latency_ms: None,
            detail: None,
        }
    }
}

export!(HostHoard);
