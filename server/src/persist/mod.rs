//! Persistence: snapshots and the append-only effect log, so a restart
//! forgets nothing. `docs/persistence.md` describes the files and their
//! guarantees; each file here is one job on the server's layer ladder (see
//! `server/tests/layers.rs`, which places `persist::<file>` on its own):
//! the formats (`format`), what commands see (`status`), loading at the
//! start (`load`), the log's writer (`aof`) and the thread that owns the
//! files (`daemon`).

pub mod aof;
pub mod daemon;
pub mod format;
pub mod load;
pub mod status;
