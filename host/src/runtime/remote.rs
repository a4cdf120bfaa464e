//! Remote runtime (placeholder).
