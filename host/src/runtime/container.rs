//! Container runtime (placeholder).
