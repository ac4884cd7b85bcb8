//! The messages of transactions over shards and of WATCH, which
//! `turn/tx.rs` sends and handles (`docs/transactions.md`).

use bytes::Bytes;
use leasehold_protocol::Reply;

use super::Job;

/// A running transaction's name: the thread that runs it, the key of the
/// connection whose EXEC it is in that thread's table (kept while the
/// transaction runs), and the connection's CLIENT ID (whose watches it
/// checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxId {
    /// The coordinating thread.
    pub thread: usize,
    /// The connection's key on that thread.
    pub conn: usize,
    /// The connection's CLIENT ID.
    pub client: u64,
}

/// The messages of a transaction over shards, and of WATCH
/// (`docs/transactions.md`). A locked shard runs only its holder's jobs:
/// other batches and lock requests wait, in order, until it is released.
#[derive(Debug)]
pub enum TxMsg {
    /// Lock this shard for `tx` (now, or after the holders before it), and
    /// check whether `tx`'s client's `watch` keys here changed.
    Lock {
        /// The transaction.
        tx: TxId,
        /// Its watched keys on this shard.
        watch: Vec<Bytes>,
    },
    /// Shard `shard` is locked for `tx`; `dirty`: a watched key changed.
    Granted {
        /// The transaction.
        tx: TxId,
        /// The shard now held.
        shard: usize,
        /// Whether one of its watched keys there changed.
        dirty: bool,
    },
    /// Jobs of `tx` on a shard it holds, in order; with `last` (the
    /// transaction's last jobs), the shard then hands its effects since
    /// the lock to the coordinator in [`TxMsg::Ran`].
    Run {
        /// The transaction.
        tx: TxId,
        /// The jobs, in order.
        jobs: Vec<Job>,
        /// The transaction's last jobs on this shard.
        last: bool,
    },
    /// A whole transaction on one shard, which needs no lock: check the
    /// `watch` keys, run every job unless one changed, publish.
    Once {
        /// The transaction.
        tx: TxId,
        /// The jobs, in order.
        jobs: Vec<Job>,
        /// Its watched keys (all on this shard).
        watch: Vec<Bytes>,
    },
    /// The replies of a [`TxMsg::Run`] or [`TxMsg::Once`] of `tx` on
    /// `shard`, one per job (none when `dirty`).
    Ran {
        /// The transaction.
        tx: TxId,
        /// The shard that ran them.
        shard: usize,
        /// One reply per job.
        replies: Vec<Reply>,
        /// A `Once` found a watched key changed and ran nothing.
        dirty: bool,
        /// After the last `Run`: the shard's effects of the transaction
        /// (whole records, see `EffectLog::take_part`), for the
        /// coordinator to append with the other shards' as one unit;
        /// `None` when the shard published them itself.
        part: Option<crate::replication::backlog::Part>,
    },
    /// `tx` is done with this shard.
    Release {
        /// The transaction.
        tx: TxId,
    },
    /// Client `client` watches `keys` (of this shard).
    Watch {
        /// The watching connection's CLIENT ID.
        client: u64,
        /// The keys.
        keys: Vec<Bytes>,
    },
    /// Client `client` no longer watches `keys` (of this shard).
    Unwatch {
        /// The connection's CLIENT ID.
        client: u64,
        /// The keys.
        keys: Vec<Bytes>,
    },
}
