//! What commands and INFO see of persistence: requests to the persistence
//! thread (`persist::daemon`, which owns the files) and its status. A
//! command never touches a file: SAVE, BGSAVE, BGREWRITEAOF and SHUTDOWN
//! post a request here and the thread does the work.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// [`Persistence::refuse_writes`]: snapshots fail.
pub const REFUSE_SNAPSHOT: u8 = 1;
/// [`Persistence::refuse_writes`]: the append-only log cannot be written.
pub const REFUSE_LOG: u8 = 2;

/// The outcome of one requested save, for the connection waiting on it.
#[derive(Debug, Default)]
pub struct Ticket {
    done: Mutex<Option<Result<(), String>>>,
}

impl Ticket {
    /// The outcome once known.
    pub fn outcome(&self) -> Option<Result<(), String>> {
        self.done.lock().clone()
    }

    /// Records the outcome.
    pub fn finish(&self, r: Result<(), String>) {
        *self.done.lock() = Some(r);
    }
}

/// A request to the persistence thread.
#[derive(Debug, Clone)]
pub enum Request {
    /// Write a snapshot now; `Some` when a connection waits for the outcome.
    Save(Option<Arc<Ticket>>),
    /// Rewrite the append-only log now.
    Rewrite,
}

/// Persistence status, as INFO persistence shows it.
#[derive(Debug, Default)]
pub struct Persistence {
    requests: Mutex<Vec<Request>>,
    wake: Condvar,
    /// A snapshot is being written.
    pub saving: AtomicBool,
    /// Writes are refused (`-MISCONF`): [`REFUSE_SNAPSHOT`] when the last
    /// snapshot failed, save rules are set and `stop-writes-on-bgsave-error`
    /// is on; [`REFUSE_LOG`] when `appendonly yes` and the log is not
    /// running (it failed and is being retried); 0 otherwise.
    pub refuse_writes: AtomicU8,
    /// Unix seconds of the last successful snapshot (LASTSAVE), or of the
    /// start when there was none.
    pub last_save_unix: AtomicU64,
    /// Whether the last snapshot failed.
    pub last_save_failed: AtomicBool,
    /// Seconds the last snapshot took (-1: none yet).
    pub last_save_secs: AtomicI64,
    /// Unix ms when the snapshot in progress started.
    pub save_started_ms: AtomicU64,
    /// Changes counted when the last successful snapshot cut.
    pub changes_at_save: AtomicU64,
    /// Snapshots written since the start.
    pub saves: AtomicU64,
    /// The append-only log is on.
    pub aof_on: AtomicBool,
    /// A log rewrite is in progress.
    pub rewriting: AtomicBool,
    /// Whether the last rewrite failed.
    pub last_rewrite_failed: AtomicBool,
    /// Whether the last write to the log failed.
    pub aof_write_failed: AtomicBool,
    /// Seconds the last rewrite took (-1: none yet).
    pub last_rewrite_secs: AtomicI64,
    /// Rewrites since the start.
    pub rewrites: AtomicU64,
    /// Bytes of the log now (base and increments).
    pub aof_size: AtomicU64,
    /// Bytes of the log after the last rewrite (or at the start).
    pub aof_base_size: AtomicU64,
    /// Delayed fsyncs (`aof_delayed_fsync`: an everysec fsync that took
    /// longer than 2 s).
    pub delayed_fsyncs: AtomicU64,
}

impl Persistence {
    /// Posts a request and wakes the persistence thread.
    pub fn request(&self, r: Request) {
        self.requests.lock().push(r);
        self.wake.notify_all();
    }

    /// Takes the pending requests, waiting up to `wait` for one.
    pub fn take_requests(&self, wait: Duration) -> Vec<Request> {
        let mut q = self.requests.lock();
        if q.is_empty() {
            let _ = self.wake.wait_for(&mut q, wait);
        }
        std::mem::take(&mut *q)
    }

    /// Whether a snapshot is in progress or requested.
    pub fn save_pending(&self) -> bool {
        self.saving.load(Ordering::SeqCst)
            || self
                .requests
                .lock()
                .iter()
                .any(|r| matches!(r, Request::Save(_)))
    }

    /// Whether a rewrite is requested and not begun (INFO
    /// `aof_rewrite_scheduled`).
    pub fn rewrite_queued(&self) -> bool {
        self.requests
            .lock()
            .iter()
            .any(|r| matches!(r, Request::Rewrite))
    }

    /// Whether a rewrite is in progress or requested.
    pub fn rewrite_pending(&self) -> bool {
        self.rewriting.load(Ordering::SeqCst) || self.rewrite_queued()
    }

    /// Wakes the persistence thread with no request (to see a stop).
    pub fn wake(&self) {
        let _q = self.requests.lock();
        self.wake.notify_all();
    }
}
