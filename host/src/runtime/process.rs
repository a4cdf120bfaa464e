//! Process runtime (placeholder).
