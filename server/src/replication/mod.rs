//! Replication: a primary streams its effects to replicas, which apply
//! them and can be promoted. `docs/replication.md` describes the protocol;
//! each file here is one job on the server's layer ladder (see
//! `server/tests/layers.rs`, which places `replication::<file>` on its own).

pub mod backlog;
pub mod feed;
pub mod link;
pub mod outbuf;
pub mod role;
pub mod snapshot;
