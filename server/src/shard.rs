//! A shard and the thread that owns it.
//!
//! Each thread runs one single-threaded tokio runtime (its event loop) and owns
//! one [`Shard`] in a `RefCell`: only that thread ever touches the keyspace, so
//! no lock guards it (DESIGN.md, decision 1). The thread serves its share of
//! the connections and drains its mailbox, where other threads send
//! [`Msg::Batch`]es of commands for keys this shard owns; each batch holds all
//! the commands for this shard from one read of one connection (decision 2),
//! and its replies go back in one message.
//!
//! The `RefCell` is borrowed only inside synchronous code (one command or one
//! batch at a time), never across an `.await`, so a borrow can never fail.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_protocol::{Args, Reply};
use tokio::sync::{mpsc, oneshot};

use crate::clock::Now;
use crate::commands::{table, Exec};
use crate::state::{ShardStats, Shared};
use crate::store::Store;

/// One shard: its keyspace plus what its handlers need.
pub struct Shard {
    /// This shard's index.
    pub id: usize,
    /// The keyspace.
    pub store: Store,
    /// The clock reading for the command being run (one snapshot per command).
    pub now: Now,
    /// Server-wide state.
    pub shared: Arc<Shared>,
    /// This thread's statistics.
    pub stats: Arc<ShardStats>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("id", &self.id)
            .field("store", &self.store)
            .finish()
    }
}

/// One command bound for a shard: its table index and its arguments.
#[derive(Debug)]
pub struct Job {
    /// Index in the command table.
    pub cmd: usize,
    /// The arguments, name included.
    pub args: Args,
}

/// A message to a thread's mailbox.
#[derive(Debug)]
pub enum Msg {
    /// A newly accepted connection for this thread to serve.
    Conn(std::net::TcpStream),
    /// Commands for this shard; the replies go back in order.
    Batch(Vec<Job>, oneshot::Sender<Vec<Reply>>),
}

impl Shard {
    /// A shard owning `store`.
    pub fn new(id: usize, store: Store, shared: Arc<Shared>) -> Shard {
        let stats = shared.shard_stats[id].clone();
        let now = shared.clock.now();
        Shard {
            id,
            store,
            now,
            shared,
            stats,
        }
    }

    /// Reads the clocks into [`Shard::now`]. Called once per read (inline
    /// commands) and once per batch (commands from other threads): every
    /// command in it sees one snapshot, and the clock costs nothing per command.
    pub fn tick(&mut self) {
        self.now = self.shared.clock.now();
        self.store.set_clock(self.now);
    }

    /// Runs one shard-side command under the snapshot of the last
    /// [`Shard::tick`]: calls the handler and counts the call. The keyspace
    /// counters are published once per batch and per flush, not per command.
    pub fn run(&mut self, cmd: usize, args: &mut Args) -> Reply {
        let spec = &table().commands[cmd];
        let handler = match spec.exec {
            Exec::Key(f) | Exec::Keys(f, _) | Exec::AllShards(f, _) | Exec::Cursor(f) => f,
            Exec::Conn(_) => unreachable!("connection commands never reach a shard"),
        };
        let reply = match handler(self, args) {
            Ok(r) => r,
            Err(e) if e.is_rejection() => {
                self.stats.rejected_calls[cmd].add(1);
                return e.reply();
            }
            Err(e) => e.reply(),
        };
        self.stats.calls[cmd].add(1);
        if reply.is_error() {
            self.stats.failed_calls[cmd].add(1);
        }
        self.stats.commands_processed.add(1);
        reply
    }

    /// Copies the store's counters into the shared statistics.
    pub fn publish(&self) {
        let c = self.store.counts();
        self.stats.keys.set(c.keys);
        self.stats.expires.set(c.expires);
        self.stats.expired_keys.set(c.expired);
        self.stats.repl_offset.set(self.store.effects.offset());
    }

    /// One active-expiry cycle. Visits a hundredth of the slots (so every key
    /// with a TTL is looked at once every 10 s at hz 10: at 1M keys that costs
    /// about 1% of a core, where a tenth cost 6% in a TOKENLEASE profile); if
    /// more than a quarter of what it examined had expired it keeps going, up
    /// to `budget`, as Redis's adaptive cycle does, so a mass expiry is
    /// reclaimed at up to a quarter of a core.
    pub fn expiry_cycle(&mut self, budget: Duration) -> u64 {
        let start = Instant::now();
        let slots = self.store.slot_range().len();
        let base = slots.div_ceil(100).max(1);
        self.tick();
        let now_ms = self.now.unix_ms;
        let mut reclaimed_total = 0;
        let mut visited = 0;
        loop {
            let (examined, reclaimed) =
                self.store.sweep(now_ms, base, || start.elapsed() >= budget);
            reclaimed_total += reclaimed;
            visited += base;
            let busy = examined > 0 && reclaimed * 4 > examined;
            if !busy || start.elapsed() >= budget || visited >= slots {
                break;
            }
        }
        self.publish();
        reclaimed_total
    }
}

/// Everything one thread holds.
pub struct Worker {
    /// Thread and shard index.
    pub id: usize,
    /// This thread's shard.
    pub shard: RefCell<Shard>,
    /// Every thread's mailbox, indexed by shard.
    pub mailboxes: Arc<Vec<mpsc::UnboundedSender<Msg>>>,
    /// Server-wide state.
    pub shared: Arc<Shared>,
}

/// The body of one thread: serve connections and the mailbox until shutdown.
pub(crate) async fn run_worker(
    worker: Rc<Worker>,
    mut mailbox: mpsc::UnboundedReceiver<Msg>,
    listener: Option<tokio::net::TcpListener>,
) {
    if let Some(listener) = listener {
        tokio::task::spawn_local(crate::net::accept_loop(worker.clone(), listener));
    }
    tokio::task::spawn_local(expiry_loop(worker.clone()));
    let shutdown = worker.shared.shutdown.notified();
    tokio::pin!(shutdown);
    loop {
        if worker
            .shared
            .shutting_down
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            break;
        }
        tokio::select! {
            _ = &mut shutdown => break,
            msg = mailbox.recv() => match msg {
                None => break,
                Some(Msg::Conn(stream)) => crate::net::spawn_connection(worker.clone(), stream),
                Some(Msg::Batch(jobs, reply_to)) => {
                    let replies = run_batch(&worker, jobs);
                    let _ = reply_to.send(replies);
                }
            },
        }
    }
}

/// Runs a batch from another thread on this shard, in order.
fn run_batch(worker: &Worker, jobs: Vec<Job>) -> Vec<Reply> {
    let mut shard = worker.shard.borrow_mut();
    shard.tick();
    shard.stats.batches_in.add(1);
    let replies = jobs
        .into_iter()
        .map(|mut j| shard.run(j.cmd, &mut j.args))
        .collect();
    shard.publish();
    replies
}

/// Runs [`Shard::expiry_cycle`] `hz` times a second; a CONFIG SET of `hz`
/// (seen through the configuration generation) takes effect at the next cycle.
async fn expiry_loop(worker: Rc<Worker>) {
    use std::sync::atomic::Ordering;
    loop {
        let gen = worker.shared.config_gen.load(Ordering::Acquire);
        let (hz, pct) = {
            let c = worker.shared.config.read();
            (
                c.expiry.hz.clamp(1, 500),
                c.expiry.budget_percent.clamp(1, 100),
            )
        };
        let period = Duration::from_millis(1000 / u64::from(hz));
        let budget = period * pct / 100;
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while worker.shared.config_gen.load(Ordering::Acquire) == gen {
            tick.tick().await;
            worker.shard.borrow_mut().expiry_cycle(budget);
        }
    }
}
