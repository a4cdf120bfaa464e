//! The embedded SQLite store (placeholder; see the module docs of `store`).
