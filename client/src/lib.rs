//! Leasehold client (work in progress).
