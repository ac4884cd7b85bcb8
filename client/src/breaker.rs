//! The circuit breaker in front of the ledger (Hystrix's pattern).
//!
//! ```text
//!            threshold consecutive failures
//!   Closed ───────────────────────────────> Open(until = now + cool_down)
//!     ^                                       │ first call after `until`
//!     │ probe succeeds                        v
//!     └────────────────────────────────── HalfOpen (one probe in flight,
//!                                          its own deadline)
//!            probe fails, times out or is dropped ──> Open(fresh cool_down)
//! ```
//!
//! It can never stay half-open: the probe runs under its own deadline, a
//! dropped probe permit counts as a failure, and a half-open state older than
//! the probe deadline (plus a grace) is treated as a failed probe by the next
//! caller. Results of calls admitted before the breaker last changed state are
//! ignored (a late success from before an outage must not close it).
//! The state sits behind a mutex: the breaker is consulted once per ledger
//! call, never per decision.

use std::time::Duration;

use metrics::Gauge;
use parking_lot::Mutex;

use crate::clock::{us, Clock};
use crate::error::Error;

/// Default failures (or missed deadlines) in a row that open the breaker: 3.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// Default time the breaker stays open before one probe: 1 s.
pub const DEFAULT_COOL_DOWN: Duration = Duration::from_secs(1);
/// Default deadline of the probe call: 500 ms.
pub const DEFAULT_PROBE_DEADLINE: Duration = Duration::from_millis(500);
/// Slack after a probe's deadline before a caller presumes the probe lost.
const PROBE_GRACE_US: u64 = 100_000;

/// Breaker settings.
#[derive(Debug, Clone)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (at least 1).
    pub failure_threshold: u32,
    /// How long it stays open before a probe.
    pub cool_down: Duration,
    /// Deadline of the probe call (the probe ignores the call's own deadline).
    pub probe_deadline: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: DEFAULT_FAILURE_THRESHOLD,
            cool_down: DEFAULT_COOL_DOWN,
            probe_deadline: DEFAULT_PROBE_DEADLINE,
        }
    }
}

/// The breaker's state as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls fail fast until the cool-down ends.
    Open,
    /// One probe is in flight; other calls fail fast.
    HalfOpen,
}

impl BreakerState {
    /// The value of the `rate_limit_circuit_state` gauge: 0 closed, 1 open,
    /// 2 half-open.
    pub fn gauge_value(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }
}

#[derive(Debug)]
enum Inner {
    Closed { failures: u32 },
    Open { until_us: u64 },
    HalfOpen { started_us: u64 },
}

#[derive(Debug)]
struct Guarded {
    inner: Inner,
    /// Bumped on every state change; permits from an older generation are ignored.
    generation: u64,
}

/// A circuit breaker; see the module docs.
pub struct Breaker {
    config: BreakerConfig,
    clock: std::sync::Arc<dyn Clock>,
    state: Mutex<Guarded>,
    gauge: Gauge,
}

impl std::fmt::Debug for Breaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker")
            .field("config", &self.config)
            .field("state", &self.state)
            .finish()
    }
}

/// Leave to make one call; report its outcome with [`Permit::record`].
/// Dropping an unrecorded probe permit counts as a failed probe.
#[derive(Debug)]
pub struct Permit<'a> {
    breaker: &'a Breaker,
    generation: u64,
    probe: bool,
    recorded: bool,
}

impl Breaker {
    /// A closed breaker; its state is the `rate_limit_circuit_state` gauge.
    pub fn new(config: BreakerConfig, clock: std::sync::Arc<dyn Clock>) -> Breaker {
        Breaker::with_gauge(config, clock, metrics::gauge!("rate_limit_circuit_state"))
    }

    /// A closed breaker for one node of a cluster; its state is the
    /// `rate_limit_circuit_state{node="<addr>"}` gauge.
    pub fn for_node(
        config: BreakerConfig,
        clock: std::sync::Arc<dyn Clock>,
        node: std::net::SocketAddr,
    ) -> Breaker {
        let gauge = metrics::gauge!("rate_limit_circuit_state", "node" => node.to_string());
        Breaker::with_gauge(config, clock, gauge)
    }

    fn with_gauge(
        config: BreakerConfig,
        clock: std::sync::Arc<dyn Clock>,
        gauge: Gauge,
    ) -> Breaker {
        gauge.set(0.0);
        Breaker {
            config: BreakerConfig {
                failure_threshold: config.failure_threshold.max(1),
                ..config
            },
            clock,
            state: Mutex::new(Guarded {
                inner: Inner::Closed { failures: 0 },
                generation: 0,
            }),
            gauge,
        }
    }

    /// The settings.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The current state (an open breaker whose cool-down is over still reads
    /// `Open` until a caller turns it into a probe).
    pub fn state(&self) -> BreakerState {
        match self.state.lock().inner {
            Inner::Closed { .. } => BreakerState::Closed,
            Inner::Open { .. } => BreakerState::Open,
            Inner::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Whether a call made now would be refused without reaching the server.
    pub fn would_refuse(&self) -> bool {
        let now = self.clock.now_us();
        match self.state.lock().inner {
            Inner::Closed { .. } => false,
            Inner::Open { until_us } => now < until_us,
            Inner::HalfOpen { started_us } => now < self.probe_expiry(started_us),
        }
    }

    /// Asks to make one call.
    ///
    /// # Errors
    /// [`Error::CircuitOpen`] while open (with the time left) or while a probe
    /// is in flight.
    pub fn admit(&self) -> Result<Permit<'_>, Error> {
        let now = self.clock.now_us();
        let mut g = self.state.lock();
        match g.inner {
            Inner::Closed { .. } => Ok(self.permit(g.generation, false)),
            Inner::Open { until_us } if now < until_us => Err(Error::CircuitOpen {
                retry_in: Duration::from_micros(until_us - now),
            }),
            Inner::HalfOpen { started_us } if now < self.probe_expiry(started_us) => {
                Err(Error::CircuitOpen {
                    retry_in: Duration::ZERO,
                })
            }
            // Cool-down over, or the last probe vanished: this caller probes.
            Inner::Open { .. } | Inner::HalfOpen { .. } => {
                self.set(&mut g, Inner::HalfOpen { started_us: now });
                Ok(self.permit(g.generation, true))
            }
        }
    }

    /// Ends an open breaker's cool-down now, so that the next call is its
    /// probe (which closes it on success, as after a cool-down). A no-op
    /// when the breaker is closed or a probe is in flight. For news that
    /// the ledger is back, such as Sentinel announcing a new primary that
    /// answered `ROLE`; only a call's success closes the breaker.
    pub fn probe_now(&self) {
        let now = self.clock.now_us();
        let mut g = self.state.lock();
        if let Inner::Open { .. } = g.inner {
            self.set(&mut g, Inner::Open { until_us: now });
        }
    }

    fn probe_expiry(&self, started_us: u64) -> u64 {
        started_us + us(self.config.probe_deadline) + PROBE_GRACE_US
    }

    fn permit(&self, generation: u64, probe: bool) -> Permit<'_> {
        Permit {
            breaker: self,
            generation,
            probe,
            recorded: false,
        }
    }

    fn set(&self, g: &mut Guarded, inner: Inner) {
        g.inner = inner;
        g.generation += 1;
        let state = match g.inner {
            Inner::Closed { .. } => BreakerState::Closed,
            Inner::Open { .. } => BreakerState::Open,
            Inner::HalfOpen { .. } => BreakerState::HalfOpen,
        };
        self.gauge.set(state.gauge_value());
    }

    fn record(&self, generation: u64, probe: bool, ok: bool) {
        let now = self.clock.now_us();
        let mut g = self.state.lock();
        if g.generation != generation {
            return;
        }
        let open = Inner::Open {
            until_us: now + us(self.config.cool_down),
        };
        match (&mut g.inner, probe, ok) {
            (Inner::HalfOpen { .. }, true, true) => self.set(&mut g, Inner::Closed { failures: 0 }),
            (Inner::HalfOpen { .. }, true, false) => self.set(&mut g, open),
            (Inner::Closed { failures }, false, true) => *failures = 0,
            (Inner::Closed { failures }, false, false) => {
                *failures += 1;
                if *failures >= self.config.failure_threshold {
                    self.set(&mut g, open);
                }
            }
            _ => {}
        }
    }
}

impl Permit<'_> {
    /// Whether this call is the half-open probe.
    pub fn is_probe(&self) -> bool {
        self.probe
    }

    /// Reports the call's outcome: `ok` false for a failure or a missed deadline.
    pub fn record(mut self, ok: bool) {
        self.recorded = true;
        self.breaker.record(self.generation, self.probe, ok);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        // A probe abandoned mid-flight (its caller was cancelled) must not
        // leave the breaker half-open.
        if self.probe && !self.recorded {
            self.breaker.record(self.generation, true, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::ManualClock;

    fn breaker() -> (Arc<ManualClock>, Breaker) {
        let clock = Arc::new(ManualClock::new());
        (clock.clone(), Breaker::new(BreakerConfig::default(), clock))
    }

    #[test]
    fn opens_after_three_consecutive_failures_only() {
        let (_, b) = breaker();
        b.admit().unwrap().record(false);
        b.admit().unwrap().record(false);
        b.admit().unwrap().record(true); // resets the run
        b.admit().unwrap().record(false);
        b.admit().unwrap().record(false);
        assert_eq!(b.state(), BreakerState::Closed);
        b.admit().unwrap().record(false);
        assert_eq!(b.state(), BreakerState::Open);
        let err = b.admit().unwrap_err();
        assert!(matches!(err, Error::CircuitOpen { retry_in } if retry_in == DEFAULT_COOL_DOWN));
    }

    #[test]
    fn one_probe_after_cool_down_then_closed() {
        let (clock, b) = breaker();
        for _ in 0..3 {
            b.admit().unwrap().record(false);
        }
        clock.advance(Duration::from_millis(999));
        assert!(b.admit().is_err());
        clock.advance(Duration::from_millis(1));
        let probe = b.admit().unwrap();
        assert!(probe.is_probe());
        assert!(b.admit().is_err(), "a second caller must not probe");
        probe.record(true);
        assert_eq!(b.state(), BreakerState::Closed);
        // Counters were reset: two failures do not open it.
        b.admit().unwrap().record(false);
        b.admit().unwrap().record(false);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn probe_now_ends_the_cool_down_but_does_not_close() {
        let (_, b) = breaker();
        b.probe_now();
        assert_eq!(b.state(), BreakerState::Closed);
        for _ in 0..3 {
            b.admit().unwrap().record(false);
        }
        assert!(b.would_refuse());
        b.probe_now();
        assert_eq!(b.state(), BreakerState::Open);
        let probe = b.admit().unwrap();
        assert!(probe.is_probe());
        b.probe_now(); // a probe in flight stays the only one
        assert!(b.admit().is_err());
        probe.record(false);
        assert!(b.would_refuse(), "a failed probe re-opens with a cool-down");
        b.probe_now();
        b.admit().unwrap().record(true);
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn dropped_or_lost_probe_reopens() {
        let (clock, b) = breaker();
        for _ in 0..3 {
            b.admit().unwrap().record(false);
        }
        clock.advance(DEFAULT_COOL_DOWN);
        drop(b.admit().unwrap());
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(DEFAULT_COOL_DOWN);
        let leaked = b.admit().unwrap();
        std::mem::forget(leaked);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        clock.advance(DEFAULT_PROBE_DEADLINE + Duration::from_millis(101));
        let probe = b.admit().expect("a lost probe must not keep it half-open");
        assert!(probe.is_probe());
    }

    #[test]
    fn late_results_from_before_the_outage_are_ignored() {
        let (clock, b) = breaker();
        let early = b.admit().unwrap();
        for _ in 0..3 {
            b.admit().unwrap().record(false);
        }
        early.record(true);
        assert_eq!(b.state(), BreakerState::Open);
        clock.advance(DEFAULT_COOL_DOWN);
        assert!(b.admit().unwrap().is_probe());
    }
}
