//! The data path's decisions, free of sockets and of the gateway: what a
//! request is ([`envelope`], [`revision`], [`headers`]), how it travels
//! ([`plan`]; on the typed path, over which connection: [`carrier`]) and
//! how it ended ([`outcome`]).
//!
//! The front (`gateway::http`, `gateway::raw`) reads a request's facts once
//! and asks [`plan::plan`]; an executor carries the plan out. Nothing here
//! names `crate::gateway`.

pub mod carrier;
pub mod envelope;
pub mod headers;
pub mod outcome;
pub mod plan;
pub mod revision;
