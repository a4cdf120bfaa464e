//! What all calls of one loaded plugin share: the per-plugin side of its
//! limits (each call's own side lives in its store, [`super::sandbox`]).
//! One per [`super::Loaded`]; a new version of the plugin starts afresh.

/// The per-plugin caps of one loaded plugin.
#[derive(Debug, Default)]
pub struct Budget {}

impl Budget {
    pub fn new(_manifest: &super::manifest::Manifest) -> Self {
        Self {}
    }
}
