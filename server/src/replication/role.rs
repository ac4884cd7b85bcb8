//! A node's replication role and identity: primary or replica, `replid`,
//! `replid2` and `second_repl_offset`, whom it follows and the state of
//! that link, and the replicas following it. INFO, ROLE and the dispatcher
//! read it; REPLICAOF changes it; the sender and link threads report here.
//!
//! The dispatcher's questions ([`Replication::is_replica`],
//! [`Replication::is_loading`]) are one relaxed atomic load each.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::replication::backlog::Backlog;

/// The record that asks replicas for an immediate `REPLCONF ACK`.
pub const GETACK_RECORD: &[u8] = b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n";

/// `master_replid2` when there is no previous history: 40 zeros.
pub const NO_REPLID: &str = "0000000000000000000000000000000000000000";

/// 40 random hex characters: a `run_id` or a `replid`.
pub fn random_hex40() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::new();
    while out.len() < 40 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(Instant::now().elapsed().as_nanos());
        h.write_usize(out.len());
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out.truncate(40);
    out
}

/// The histories this node can continue (Redis's replication ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    /// `master_replid`: the history this node's stream belongs to.
    pub replid: String,
    /// `master_replid2`: the history it continued before the last promotion.
    pub replid2: String,
    /// `second_repl_offset`: the first offset not of `replid2`'s history (-1: none).
    pub second_offset: i64,
}

/// Whom a replica follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Primary host.
    pub host: String,
    /// Primary port.
    pub port: u16,
}

/// The replica's link to its primary, as INFO shows it.
#[derive(Debug, Default)]
pub struct Link {
    /// The link's connection is serving the stream (`master_link_status:up`).
    pub up: bool,
    /// A full sync's payload is being loaded (`master_sync_in_progress:1`).
    pub syncing: bool,
    /// When the link last went down (`None`: never up yet).
    pub down_since: Option<Instant>,
    /// When bytes last came from the primary.
    pub last_io: Option<Instant>,
    /// CLIENT ID of the link's connection while it is attached.
    pub client: Option<u64>,
}

/// What a primary knows of one replica (INFO `slaveN`, ROLE, WAIT).
#[derive(Debug, Clone)]
pub struct ReplicaInfo {
    /// Registry id.
    pub id: u64,
    /// The replica's address as seen by the primary (or `replica-announce-ip`).
    pub ip: String,
    /// Its `REPLCONF listening-port`.
    pub port: u16,
    /// `wait_bgsave`, `send_bulk` or `online`.
    pub state: &'static str,
    /// The offset of its last `REPLCONF ACK`.
    pub ack: u64,
    /// When that ACK came.
    pub ack_at: Instant,
}

/// How PSYNCs were answered (INFO stats `sync_full`, `sync_partial_ok`,
/// `sync_partial_err`).
#[derive(Debug, Default)]
pub struct SyncCounts {
    /// Full syncs served.
    pub full: AtomicU64,
    /// Partial resyncs served.
    pub partial_ok: AtomicU64,
    /// PSYNCs naming a history or offset that could not be continued.
    pub partial_err: AtomicU64,
}

/// The link's CLIENT ID between the handshake and the registration.
const PENDING_LINK: u64 = u64::MAX;

/// A node's replication state.
#[derive(Debug)]
pub struct Replication {
    /// The merged stream (on a replica: what it applied).
    pub backlog: Arc<Backlog>,
    replica: AtomicBool,
    loading: AtomicBool,
    ids: Mutex<Ids>,
    target: Mutex<Option<Target>>,
    /// Bumped at every change of role or target: link and sender threads of
    /// an older generation stop.
    generation: AtomicU64,
    /// The link's state (replica).
    pub link: Mutex<Link>,
    replicas: Mutex<Vec<ReplicaInfo>>,
    next_replica: AtomicU64,
    /// Held for the whole of a full sync: one snapshot at a time.
    pub full_sync: Mutex<()>,
    /// Full syncs this node took as a replica (each replaced its dataset
    /// and restarted its stream: a log of it must be rewritten).
    pub full_syncs_taken: AtomicU64,
    /// PSYNC outcomes.
    pub syncs: SyncCounts,
    /// A full sync's payload was cut short: this node has no history to
    /// continue, and its next PSYNC asks for a full sync (`PSYNC ? -1`).
    pub history_lost: AtomicBool,
    /// Signalled when the stream asks for an ACK (`REPLCONF GETACK`).
    acks: (
        crossbeam_channel::Sender<()>,
        crossbeam_channel::Receiver<()>,
    ),
}

impl Replication {
    /// A primary with a fresh `replid` and an empty stream keeping
    /// `backlog_bytes`.
    pub fn new(backlog_bytes: usize) -> Replication {
        Replication {
            backlog: Arc::new(Backlog::new(backlog_bytes)),
            replica: AtomicBool::new(false),
            loading: AtomicBool::new(false),
            ids: Mutex::new(Ids {
                replid: random_hex40(),
                replid2: NO_REPLID.to_string(),
                second_offset: -1,
            }),
            target: Mutex::new(None),
            generation: AtomicU64::new(0),
            link: Mutex::new(Link::default()),
            replicas: Mutex::new(Vec::new()),
            next_replica: AtomicU64::new(1),
            full_sync: Mutex::new(()),
            full_syncs_taken: AtomicU64::new(0),
            syncs: SyncCounts::default(),
            history_lost: AtomicBool::new(false),
            acks: crossbeam_channel::bounded(1),
        }
    }

    /// Whether this node is a replica (clients' writes are refused).
    pub fn is_replica(&self) -> bool {
        self.replica.load(Ordering::Relaxed)
    }

    /// Whether a full sync's payload is loading (clients get `-LOADING`).
    pub fn is_loading(&self) -> bool {
        self.loading.load(Ordering::Relaxed)
    }

    /// Starts or ends loading.
    pub fn set_loading(&self, yes: bool) {
        self.loading.store(yes, Ordering::SeqCst);
        self.link.lock().syncing = yes;
    }

    /// The current generation (see [`Replication::generation_is`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Whether no role or target change happened since `gen` was read.
    pub fn generation_is(&self, gen: u64) -> bool {
        self.generation() == gen
    }

    /// The current ids.
    pub fn ids(&self) -> Ids {
        self.ids.lock().clone()
    }

    /// Whom this node follows (`None` on a primary).
    pub fn target(&self) -> Option<Target> {
        self.target.lock().clone()
    }

    /// REPLICAOF NO ONE: the node becomes a primary continuing its
    /// history: `replid2` takes the old `replid`, `second_repl_offset` the
    /// next offset, and a fresh `replid` starts. Returns the CLIENT ID of
    /// the link's connection, for the caller to close. A primary stays as
    /// it is (`None`).
    pub fn promote(&self) -> Option<u64> {
        let mut target = self.target.lock();
        target.take()?;
        let mut ids = self.ids.lock();
        ids.replid2 = std::mem::replace(&mut ids.replid, random_hex40());
        ids.second_offset = self.backlog.offset() as i64 + 1;
        self.replica.store(false, Ordering::SeqCst);
        self.loading.store(false, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut link = self.link.lock();
        let client = link.client.take();
        *link = Link::default();
        client
    }

    /// REPLICAOF host port: the node becomes (or stays) a replica of
    /// `target`; replicas following it are dropped and its link restarts.
    /// Returns the CLIENT ID of the old link's connection, for the caller
    /// to close.
    pub fn follow(&self, to: Target) -> Option<u64> {
        let mut target = self.target.lock();
        *target = Some(to);
        self.replica.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
        let mut link = self.link.lock();
        link.up = false;
        link.down_since.get_or_insert_with(Instant::now);
        link.client.take()
    }

    /// A full sync at `offset` of history `replid` begins on this replica.
    pub fn adopt_full_sync(&self, replid: &str, offset: u64) {
        let mut ids = self.ids.lock();
        ids.replid = replid.to_string();
        ids.replid2 = NO_REPLID.to_string();
        ids.second_offset = -1;
        self.backlog.restart_at(offset);
        self.full_syncs_taken.fetch_add(1, Ordering::SeqCst);
        self.history_lost.store(false, Ordering::SeqCst);
    }

    /// The primary continues the stream under `replid` (`+CONTINUE`): a new
    /// id means it was promoted, and the old one becomes `replid2`.
    pub fn adopt_continue(&self, replid: &str) {
        let mut ids = self.ids.lock();
        if ids.replid != replid {
            ids.replid2 = std::mem::replace(&mut ids.replid, replid.to_string());
            ids.second_offset = self.backlog.offset() as i64 + 1;
        }
    }

    /// The position to stream from for `PSYNC <id> <offset>`, or `None`
    /// when a full sync is needed: the id must be this history's (or the
    /// previous one's, up to where it ended) and the bytes from `offset`
    /// must all be kept.
    pub fn continue_from(&self, id: &str, offset: i64) -> Option<u64> {
        let ids = self.ids.lock();
        let ours = id == ids.replid || (id == ids.replid2 && offset <= ids.second_offset);
        if !ours || offset < 1 {
            return None;
        }
        let from = offset as u64 - 1;
        self.backlog.covers(from).then_some(from)
    }

    /// [`Replication::continue_from`], counted: a PSYNC that names a
    /// history (not `?`) and cannot continue is a `sync_partial_err`.
    pub fn answer_psync(&self, id: &str, offset: i64) -> Option<u64> {
        let from = self.continue_from(id, offset);
        let counter = match (from, id) {
            (Some(_), _) => &self.syncs.partial_ok,
            (None, "?") => &self.syncs.full,
            (None, _) => {
                self.syncs.partial_err.fetch_add(1, Ordering::Relaxed);
                &self.syncs.full
            }
        };
        counter.fetch_add(1, Ordering::Relaxed);
        from
    }

    /// The link's connection is attached (CLIENT ID `client`) and serving.
    pub fn link_up(&self, client: u64) {
        let mut link = self.link.lock();
        link.up = true;
        link.client = Some(client);
        link.last_io = Some(Instant::now());
        link.down_since = None;
    }

    /// The link's connection closed; `untouched`: during a full sync whose
    /// payload had not begun replacing the dataset (loading ends).
    pub fn link_down(&self, client: u64, untouched: bool) {
        let mut link = self.link.lock();
        if link.client == Some(client) || link.client == Some(PENDING_LINK) {
            if untouched {
                self.loading.store(false, Ordering::SeqCst);
            }
            if link.syncing {
                // Half a payload is no history to continue: the next
                // PSYNC must ask for a full sync.
                self.ids.lock().replid = random_hex40();
                self.history_lost.store(true, Ordering::SeqCst);
            }
            link.client = None;
            link.up = false;
            link.syncing = false;
            link.down_since = Some(Instant::now());
        }
    }

    /// A link's connection was handed to the event loop and will be
    /// attached ([`Replication::link_up`]) when it registers.
    pub fn link_attaching(&self) {
        self.link.lock().client = Some(PENDING_LINK);
    }

    /// Whether a link connection is attached (or being attached).
    pub fn link_attached(&self) -> bool {
        self.link.lock().client.is_some()
    }

    /// Asks the link thread to send `REPLCONF ACK` now.
    pub fn want_ack(&self) {
        let _ = self.acks.0.try_send(());
    }

    /// Waits up to `timeout` for an ACK request; true when one came.
    pub fn ack_wanted(&self, timeout: std::time::Duration) -> bool {
        self.acks.1.recv_timeout(timeout).is_ok()
    }

    /// Registers a replica (state `wait_bgsave`); returns its id.
    pub fn add_replica(&self, ip: String, port: u16) -> u64 {
        let id = self.next_replica.fetch_add(1, Ordering::Relaxed);
        self.replicas.lock().push(ReplicaInfo {
            id,
            ip,
            port,
            state: "wait_bgsave",
            ack: 0,
            ack_at: Instant::now(),
        });
        id
    }

    /// Changes a replica's INFO state.
    pub fn replica_state(&self, id: u64, state: &'static str) {
        if let Some(r) = self.replicas.lock().iter_mut().find(|r| r.id == id) {
            r.state = state;
        }
    }

    /// Records a replica's `REPLCONF ACK <offset>`.
    pub fn replica_ack(&self, id: u64, offset: u64) {
        if let Some(r) = self.replicas.lock().iter_mut().find(|r| r.id == id) {
            r.ack = r.ack.max(offset);
            r.ack_at = Instant::now();
        }
    }

    /// The merged stream lost records (a shard's effects outran its ring):
    /// a new `replid` with no previous history, and every sender stops, so
    /// no replica continues partially over the gap.
    pub fn break_history(&self) {
        let mut ids = self.ids.lock();
        ids.replid = random_hex40();
        ids.replid2 = NO_REPLID.to_string();
        ids.second_offset = -1;
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// CLIENT KILL TYPE replica: every sender stops (its replica will
    /// reconnect and resync). Returns how many replicas there were.
    pub fn drop_replicas(&self) -> usize {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.replicas.lock().len()
    }

    /// Forgets a replica whose connection closed.
    pub fn remove_replica(&self, id: u64) {
        self.replicas.lock().retain(|r| r.id != id);
    }

    /// How many replicas have acknowledged `offset` or more.
    pub fn acked(&self, offset: u64) -> usize {
        self.replicas
            .lock()
            .iter()
            .filter(|r| r.ack >= offset)
            .count()
    }

    /// Asks every replica for an acknowledgement now: a `REPLCONF GETACK *`
    /// record in the stream.
    pub fn request_acks(&self) {
        self.backlog.append(&[GETACK_RECORD]);
    }

    /// The replicas, in connection order.
    pub fn replicas(&self) -> Vec<ReplicaInfo> {
        self.replicas.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_keeps_the_old_history_as_replid2() {
        let r = Replication::new(1024);
        r.follow(Target {
            host: "127.0.0.1".into(),
            port: 1,
        });
        r.adopt_full_sync("a".repeat(40).as_str(), 100);
        r.backlog.append(&[b"0123456789"]);
        r.link_up(7);
        assert_eq!(r.promote(), Some(7), "the link's connection, to close");
        assert!(!r.link_attached());
        let ids = r.ids();
        assert_eq!(ids.replid2, "a".repeat(40));
        assert_eq!(ids.second_offset, 111);
        assert_ne!(ids.replid, ids.replid2);
        // A sibling replica at 110 bytes continues; one past the promotion
        // point of the old history cannot.
        assert_eq!(r.continue_from(&"a".repeat(40), 111), Some(110));
        assert_eq!(r.continue_from(&"a".repeat(40), 105), Some(104));
        assert_eq!(r.continue_from(&"a".repeat(40), 112), None);
        assert_eq!(r.continue_from(&ids.replid, 111), Some(110));
        assert_eq!(
            r.continue_from(&ids.replid, 99),
            None,
            "before the history kept"
        );
        assert_eq!(r.continue_from("?", -1), None);
        // Records lost to the stream: no history can be continued.
        let before = r.generation();
        r.break_history();
        assert_eq!(r.continue_from(&ids.replid, 111), None);
        assert_eq!(r.continue_from(&"a".repeat(40), 111), None);
        assert!(!r.generation_is(before), "senders stop");
    }
}
