//! The [`Decision`] each path returns: allowed (its `remaining` and `reset`
//! from the hot record and the policy), limited, the policy's mode applied
//! to an over-quota decision, and a bypass when the ledger cannot answer
//! (the fail-open static bucket, or fail-closed).

use std::time::Duration;

use super::bucket::{Bucket, KeyCold};
use super::{LeaseManager, PolicyState};
use crate::decision::{BypassReason, Decision, Outcome};
use crate::policy::{FailureMode, Mode};

impl LeaseManager {
    /// The ledger's balance at the last lease: the burst minus its deficit.
    #[inline]
    pub(super) fn ledger_balance(state: &PolicyState, bucket: Bucket<'_>) -> u64 {
        state
            .policy
            .burst
            .saturating_sub(bucket.hot.ledger_deficit())
    }

    /// Time until the policy's bucket is full again from `balance` tokens:
    /// the missing tokens times the refill interval (the ledger's
    /// `reset_after` for the same balance). A gateway's balance is its local
    /// tokens plus the ledger's at the last lease, so `reset` and `remaining`
    /// describe one state (rounded up to the next nanosecond).
    #[inline]
    fn reset(state: &PolicyState, balance: u64) -> Duration {
        let missing = state.policy.burst.saturating_sub(balance);
        let ns = missing as f64 * state.refill_ns;
        // `as u64` saturates (a refill beyond 584 years reads as that). Not
        // `ceil`: without SSE4.1 it is a libm call on the request path.
        let whole = ns as u64;
        Duration::from_nanos(whole.saturating_add(u64::from((whole as f64) < ns)))
    }

    /// An allowed decision that left `left` local tokens: its fields come
    /// from the hot record and the policy (no clock read).
    #[inline]
    pub(super) fn allowed(&self, state: &PolicyState, bucket: Bucket<'_>, left: u64) -> Decision {
        let remaining = left.saturating_add(Self::ledger_balance(state, bucket));
        Decision {
            allowed: true,
            outcome: Outcome::Allowed,
            limit: state.policy.requests_per_unit,
            window: state.policy.unit,
            remaining,
            reset: Self::reset(state, remaining),
            retry_after: None,
            over_quota: false,
        }
    }

    /// Over quota, before the policy's mode is applied.
    pub(super) fn limited(&self, state: &PolicyState, bucket: Bucket<'_>, now: u64) -> Decision {
        let until = bucket.cold().blocked(now).unwrap_or(now);
        Decision {
            allowed: false,
            outcome: Outcome::Limited,
            limit: state.policy.requests_per_unit,
            window: state.policy.unit,
            remaining: 0,
            // This path reads the clock anyway: count the time since the
            // ledger's reading down (the ledger refills meanwhile).
            reset: Self::reset(state, Self::ledger_balance(state, bucket)).saturating_sub(
                Duration::from_micros(now.saturating_sub(bucket.cold().ledger_at_us())),
            ),
            retry_after: Some(Duration::from_micros(until - now)),
            over_quota: true,
        }
    }

    /// Applies the policy's mode to an over-quota decision for `key`, and
    /// counts it.
    pub(super) fn finish(&self, state: &PolicyState, key: &[u8], mut d: Decision) -> Decision {
        if d.outcome == Outcome::Limited {
            match state.policy.mode {
                Mode::Enforce => {}
                Mode::Canary { .. } if state.policy.enforces(key) => {}
                Mode::Canary { .. } => {
                    (d.allowed, d.outcome, d.retry_after) = (true, Outcome::SoftOverQuota, None)
                }
                Mode::Shadow => {
                    (d.allowed, d.outcome, d.retry_after) = (true, Outcome::ShadowLimited, None)
                }
                Mode::Soft => {
                    (d.allowed, d.outcome, d.retry_after) = (true, Outcome::SoftOverQuota, None)
                }
            }
        }
        state.metrics.record(d.outcome);
        d
    }

    /// The ledger could not answer for this key.
    pub(super) fn bypass(
        &self,
        state: &PolicyState,
        bucket: &KeyCold,
        reason: Option<BypassReason>,
        now: u64,
    ) -> Decision {
        let reason = reason.unwrap_or(BypassReason::LedgerError);
        let p = &state.policy;
        let mut d = Decision {
            allowed: false,
            outcome: Outcome::FailedClosed(reason),
            limit: p.requests_per_unit,
            window: p.unit,
            remaining: 0,
            reset: Duration::ZERO,
            retry_after: Some(self.inner.client.config().breaker.cool_down),
            over_quota: false,
        };
        if p.failure_mode == FailureMode::FailOpen {
            if bucket.fallback_take(now, state.fallback_interval_ns, state.fallback_burst) {
                (d.allowed, d.outcome, d.retry_after) = (true, Outcome::Bypassed(reason), None);
            } else {
                let wait = Duration::from_nanos(state.fallback_interval_ns);
                (d.outcome, d.retry_after) = (Outcome::FallbackLimited(reason), Some(wait));
            }
        }
        state.metrics.record(d.outcome);
        d
    }
}
