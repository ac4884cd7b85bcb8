//! Test harness for the end-to-end suite (see `tests/`).
