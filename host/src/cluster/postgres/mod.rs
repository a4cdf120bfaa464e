//! The cluster's seams on PostgreSQL: what several replicas sharing one
//! store (`[store] url_env`) use to act as one gateway.
//!
//! - [`book`]: the session book (closed sessions, what sessions kept);
//! - [`command`]: operator commands routed to the lease holder;
//! - [`lease`]: supervision leases, one supervisor per shared backend;
//! - [`listen`]: what the replicas tell each other (health, listings);
//! - [`replicas`]: who is alive, and what each serves;
//! - [`retry`]: MRTR retries routed to the replica holding their call;
//! - [`route`]: how one replica asks another (commands, retries).
//!
//! Their tables are the store's (`store::postgres`'s migrations), and they
//! use its pool of connections.

pub mod book;
pub mod command;
pub mod lease;
pub mod listen;
pub mod replicas;
pub mod retry;
pub mod route;
