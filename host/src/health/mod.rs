//! Health: turns probe results and runtime exits into state transitions, and
//! decides restarts by policy; it never calls a runtime except through the
//! supervisor.

pub mod machine;
pub mod policy;
pub mod published;
pub mod sanitize;
mod state;
pub mod stats;

pub use published::Status;
pub use state::{HealthState, Transition, advertisable, unix_ms};
