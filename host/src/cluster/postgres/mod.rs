//! The cluster's seams on PostgreSQL: what several replicas sharing one
//! store (`[store] url_env`) use to act as one gateway.
//!
//! - [`book`]: the session book (closed sessions, what sessions kept);
//! - [`lease`]: supervision leases, one supervisor per shared backend;
//! - [`listen`]: what the replicas tell each other (health, listings).
//!
//! Their tables are the store's (`store::postgres`'s migrations), and they
//! use its pool of connections.

pub mod book;
pub mod lease;
pub mod listen;
