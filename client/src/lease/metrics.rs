//! Metric handles, registered once per policy when the manager is built so the
//! request path only increments (no name lookup, no label allocation).
//!
//! Names:
//! - `rate_limit_decisions_total{policy, outcome}` (counter)
//! - `rate_limit_bypassed_total{policy, reason}` (counter): decisions admitted
//!   by the fail-open static bucket because the ledger could not answer, or
//!   (`reason="override"`) because an emergency override disabled the policy
//! - `rate_limit_overrides_total{event="applied"|"refused"|"expired"}`
//!   (counter): override messages this manager applied or refused, and its
//!   overrides that ended by themselves
//! - `rate_limit_lease_rtt_seconds` (histogram): TOKENLEASE round trips
//! - `rate_limit_lease_size_tokens` (histogram): tokens granted per lease
//! - `rate_limit_ledger_calls_total{command}` (counter)
//! - `rate_limit_circuit_state` (gauge, see [`crate::breaker`])

use metrics::{counter, histogram, Counter, Histogram};

use crate::decision::{BypassReason, Outcome};

pub(crate) struct PolicyMetrics {
    decisions: [Counter; Outcome::COUNT],
    bypassed: [Counter; BypassReason::ALL.len()],
}

impl PolicyMetrics {
    pub(crate) fn new(policy: &str) -> PolicyMetrics {
        let p = policy.to_owned();
        PolicyMetrics {
            decisions: Outcome::LABELS.map(|o| {
                counter!("rate_limit_decisions_total", "policy" => p.clone(), "outcome" => o)
            }),
            bypassed: BypassReason::ALL.map(|r| {
                counter!("rate_limit_bypassed_total", "policy" => p.clone(), "reason" => r.label())
            }),
        }
    }

    /// Counts `n` allowed decisions at once.
    pub(crate) fn record_allowed(&self, n: u64) {
        self.decisions[Outcome::Allowed.index()].increment(n);
    }

    #[inline]
    pub(crate) fn record(&self, outcome: Outcome) {
        self.record_n(outcome, 1);
    }

    /// Counts `n` decisions of `outcome` at once.
    #[inline]
    pub(crate) fn record_n(&self, outcome: Outcome, n: u64) {
        self.decisions[outcome.index()].increment(n);
        if let Outcome::Bypassed(reason) = outcome {
            self.bypassed[reason as usize].increment(n);
        }
    }
}

pub(crate) struct LedgerMetrics {
    pub(crate) rtt: Histogram,
    pub(crate) lease_size: Histogram,
    pub(crate) leases: Counter,
    pub(crate) returns: Counter,
}

impl LedgerMetrics {
    pub(crate) fn new() -> LedgerMetrics {
        LedgerMetrics {
            rtt: histogram!("rate_limit_lease_rtt_seconds"),
            lease_size: histogram!("rate_limit_lease_size_tokens"),
            leases: counter!("rate_limit_ledger_calls_total", "command" => "TOKENLEASE"),
            returns: counter!("rate_limit_ledger_calls_total", "command" => "TOKENRETURN"),
        }
    }
}

/// `rate_limit_overrides_total{event}`, one per manager.
pub(crate) struct OverrideMetrics {
    pub(crate) applied: Counter,
    pub(crate) refused: Counter,
    pub(crate) expired: Counter,
}

impl OverrideMetrics {
    pub(crate) fn new() -> OverrideMetrics {
        let c = |event: &'static str| counter!("rate_limit_overrides_total", "event" => event);
        OverrideMetrics {
            applied: c("applied"),
            refused: c("refused"),
            expired: c("expired"),
        }
    }
}
