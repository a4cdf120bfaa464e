//! Catalog freshness: how every live session learns that what it may list
//! changed, without reconnecting.
//!
//! The gateway's update task is the only writer of the catalog snapshot.
//! When a rebuild changes it (a backend's advertisability flipped, a backend
//! re-listed with other capabilities, the backend set changed) it tells the
//! [`debounce::Debouncer`], which delivers — first change at once, bursts
//! coalesced per `[freshness] debounce` — to the session registry; each
//! session's resync worker then notifies only what that session has not
//! seen (`gateway/sessions.rs`). The [`poller`] re-lists every backend on a
//! schedule so a silent redeploy is noticed too.

pub mod debounce;
pub mod poller;
