//! Reference model (tests only).
