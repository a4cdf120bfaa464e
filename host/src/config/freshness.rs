//! `[freshness]` and `[poller]`: how live sessions learn of catalog changes.

use std::time::Duration;

use serde::Deserialize;

use super::Problems;

/// `[freshness]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFreshness {
    pub debounce: Option<String>,
}

/// `[poller]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPoller {
    pub interval: Option<String>,
    pub concurrency: Option<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FreshnessConfig {
    /// `debounce`: the first catalog change after a quiet period reaches
    /// sessions at once; later ones within this window are coalesced into
    /// one trailing delivery. Default: the `[health] interval`.
    pub debounce: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PollerConfig {
    /// `interval`: every backend's tools, resources and prompts are listed
    /// again once per interval, spread evenly over it. Default `5m`;
    /// `VIGIL_POLL_INTERVAL` overrides the file. `"0s"` turns polling off.
    pub interval: Duration,
    /// `concurrency`: listings in flight at once. Default 4.
    pub concurrency: usize,
}

/// The environment variable that overrides `[poller] interval`.
pub const POLL_INTERVAL_ENV: &str = "VIGIL_POLL_INTERVAL";

impl Problems {
    pub(crate) fn freshness(
        &mut self,
        raw: Option<RawFreshness>,
        health_interval: Duration,
    ) -> FreshnessConfig {
        let raw = raw.unwrap_or_default();
        let debounce = match raw.debounce {
            Some(text) => self.duration("freshness.debounce", Some(text), "0s"),
            None => health_interval,
        };
        FreshnessConfig { debounce }
    }

    pub(crate) fn poller(
        &mut self,
        raw: Option<RawPoller>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> PollerConfig {
        let raw = raw.unwrap_or_default();
        let interval = match env(POLL_INTERVAL_ENV) {
            Some(text) => self.duration(POLL_INTERVAL_ENV, Some(text), "5m"),
            None => self.duration("poller.interval", raw.interval, "5m"),
        };
        let concurrency = match raw.concurrency {
            Some(0) => {
                self.add("poller.concurrency", "must be at least 1");
                1
            }
            Some(n) => n as usize,
            None => 4,
        };
        PollerConfig {
            interval,
            concurrency,
        }
    }
}
