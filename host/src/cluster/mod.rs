//! What several replicas share, behind small seams with a local
//! implementation each (one replica) and, in [`postgres`], one on the
//! shared PostgreSQL store (several replicas, `docs/cluster.md`):
//!
//! - the session book and its sealed ids ([`book`], [`session_id`],
//!   [`key`]);
//! - rate limiting: where `[[policy]]` rate buckets live ([`rate`]);
//! - supervision leases: one supervisor per backend ([`lease`]);
//! - the feed of backend updates and health transitions ([`feed`]);
//! - MRTR parked calls, the replica that holds each, and retries routed
//!   to it ([`parked`], [`replica`], [`retry`]).
//!
//! Nothing here names the front: the front asks these seams, and the
//! composition root picks their implementations.

pub mod book;
pub mod feed;
pub mod key;
pub mod lease;
pub mod parked;
pub mod postgres;
pub mod rate;
pub mod replica;
pub mod retry;
pub mod session_id;
