//! The current catalog snapshot, shared by its one writer (the gateway's
//! update task) and its readers (routing, session resync).

use std::sync::{Arc, RwLock};

use super::Catalog;

#[derive(Default)]
pub struct Current(RwLock<Arc<Catalog>>);

impl Current {
    pub fn get(&self) -> Arc<Catalog> {
        match self.0.read() {
            Ok(c) => c.clone(),
            Err(e) => e.into_inner().clone(),
        }
    }

    /// Installs `next`; returns the snapshot it replaced.
    pub fn replace(&self, next: Arc<Catalog>) -> Arc<Catalog> {
        let mut cur = match self.0.write() {
            Ok(c) => c,
            Err(e) => e.into_inner(),
        };
        std::mem::replace(&mut *cur, next)
    }
}
