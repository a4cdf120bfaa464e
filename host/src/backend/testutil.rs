//! Backends for unit tests: configured, never started.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::LoggingMessageNotificationParam as Log;

use super::{Backend, Bounds, Downstream, ListKind, ListLimits};
use crate::auth::CallerKey;

/// Where a test backend's unsolicited traffic goes: nowhere.
pub struct Nowhere;

impl Downstream for Nowhere {
    fn list_changed(&self, _: &Arc<str>, _: ListKind) {}
    fn log(&self, _: &Arc<str>, _: Option<u64>, _: Log) {}
    fn resource_updated(&self, _: &Arc<str>, _: Option<u64>, _: String) {}
    fn lane_log(&self, _: &Arc<str>, _: &CallerKey, _: Log) {}
}

/// A stdio backend named `mem` running `x`, with `extra` TOML lines of its
/// table (e.g. `share = "session"`).
pub fn stdio(extra: &str) -> Arc<Backend> {
    let toml =
        format!("[[backends]]\nname = \"mem\"\ntransport = \"stdio\"\ncommand = \"x\"\n{extra}\n");
    let config = crate::config::Config::parse(&toml, std::path::Path::new("vigil.toml"))
        .expect("a test backend's config parses")
        .backends
        .remove(0);
    let bounds = Bounds {
        connect: Duration::from_secs(1),
        request: Duration::from_secs(1),
        list: ListLimits::default(),
        max_result: 1 << 20,
    };
    Backend::new(
        config,
        bounds,
        Arc::new(Nowhere),
        crate::background::Background::detached(),
    )
}
