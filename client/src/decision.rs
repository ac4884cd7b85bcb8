//! A rate-limit decision and the HTTP header values it renders.
//!
//! Headers follow draft-ietf-httpapi-ratelimit-headers (structured fields):
//! `RateLimit-Policy: "name";q=<quota>;w=<window seconds>` and
//! `RateLimit: "name";r=<remaining>;t=<seconds until reset>`, plus RFC 9110's
//! `Retry-After` in whole seconds, rounded up so that a client that waits
//! exactly that long is not refused for having come back early.

use std::fmt::Write as _;
use std::time::Duration;

/// Why the ledger did not govern a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BypassReason {
    /// A lease call missed its deadline.
    LedgerTimeout,
    /// The circuit breaker is open.
    CircuitOpen,
    /// The ledger failed otherwise (connection refused, error reply).
    LedgerError,
    /// An operator's emergency override disabled the policy
    /// ([`crate::overrides`]): every decision is admitted, none charged.
    Override,
}

impl BypassReason {
    /// The `reason` label of `rate_limit_bypassed_total`.
    pub fn label(self) -> &'static str {
        match self {
            BypassReason::LedgerTimeout => "ledger_timeout",
            BypassReason::CircuitOpen => "circuit_open",
            BypassReason::LedgerError => "ledger_error",
            BypassReason::Override => "override",
        }
    }

    /// Every reason, in label order.
    pub const ALL: [BypassReason; 4] = [
        BypassReason::LedgerTimeout,
        BypassReason::CircuitOpen,
        BypassReason::LedgerError,
        BypassReason::Override,
    ];
}

/// What happened, for metrics and for the gateway's choice of status code.
/// A ledger failure is never a `Limited`: it is `Bypassed`,
/// `FallbackLimited` or `FailedClosed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Within quota.
    Allowed,
    /// Over quota (denied by the ledger or blocked locally after a denial).
    Limited,
    /// Over quota in a shadow-mode policy: admitted, counted.
    ShadowLimited,
    /// Over quota in a soft-mode policy: admitted, marked over quota.
    SoftOverQuota,
    /// The ledger was unavailable and the fail-open static bucket admitted
    /// it, or (reason [`BypassReason::Override`]) an emergency override
    /// disabled the policy and it was admitted without the ledger.
    Bypassed(BypassReason),
    /// The ledger was unavailable and the fail-open static bucket is empty.
    FallbackLimited(BypassReason),
    /// The ledger was unavailable and the policy fails closed.
    FailedClosed(BypassReason),
}

impl Outcome {
    /// The `outcome` label of `rate_limit_decisions_total`.
    pub fn label(self) -> &'static str {
        Outcome::LABELS[self.index()]
    }

    pub(crate) const COUNT: usize = 7;

    pub(crate) fn index(self) -> usize {
        match self {
            Outcome::Allowed => 0,
            Outcome::Limited => 1,
            Outcome::ShadowLimited => 2,
            Outcome::SoftOverQuota => 3,
            Outcome::Bypassed(_) => 4,
            Outcome::FallbackLimited(_) => 5,
            Outcome::FailedClosed(_) => 6,
        }
    }

    pub(crate) const LABELS: [&'static str; Outcome::COUNT] = [
        "allowed",
        "limited",
        "shadow_limited",
        "soft_over_quota",
        "bypassed",
        "fallback_limited",
        "failed_closed",
    ];
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether to serve the request.
    pub allowed: bool,
    /// What happened.
    pub outcome: Outcome,
    /// The policy's quota (requests per window).
    pub limit: u64,
    /// The policy's window (its `unit`).
    pub window: Duration,
    /// Requests left, as far as this gateway knows: its local tokens plus the
    /// ledger's balance at the last lease (kept as the ledger's deficit from
    /// a full bucket, to 15 significant bits rounded up: exact while fewer
    /// than 32 768 tokens are missing, else low by at most 1/32 768 of them).
    pub remaining: u64,
    /// Time until the quota is whole again from `remaining`: the tokens
    /// missing from the policy's burst times its refill interval (`unit /
    /// requests_per_unit`), rounded up to the nanosecond; what the ledger's
    /// TOKENLEASE `reset_after` says for the same balance. `remaining` 0 with
    /// a burst of 100 at 100 a minute: 60 s. A `Limited` decision counts it
    /// down from the ledger's reading (an allowed one reads no clock).
    pub reset: Duration,
    /// When denied: how long to wait before retrying.
    pub retry_after: Option<Duration>,
    /// Over quota but admitted (soft or shadow mode).
    pub over_quota: bool,
}

fn whole_seconds_up(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Appends `s` to `out` as a structured-field string (RFC 8941 `sf-string`,
/// as the RateLimit headers carry names): `"name"`, with `"` and `\\`
/// escaped and characters outside printable ASCII written as `?`.
pub fn sf_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

impl Decision {
    /// `RateLimit-Policy` value: `"name";q=<limit>;w=<window seconds>`.
    pub fn ratelimit_policy_header(&self, policy_name: &str) -> String {
        let mut out = String::new();
        sf_string(&mut out, policy_name);
        let _ = write!(out, ";q={};w={}", self.limit, whole_seconds_up(self.window));
        out
    }

    /// `RateLimit` value: `"name";r=<remaining>;t=<seconds until reset, up>`.
    pub fn ratelimit_header(&self, policy_name: &str) -> String {
        let mut out = String::new();
        sf_string(&mut out, policy_name);
        let _ = write!(
            out,
            ";r={};t={}",
            self.remaining,
            whole_seconds_up(self.reset)
        );
        out
    }

    /// `Retry-After` value in whole seconds, rounded up; `None` when admitted
    /// or when no wait is known.
    pub fn retry_after_header(&self) -> Option<String> {
        self.retry_after.map(|d| whole_seconds_up(d).to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_ietf_headers_and_rounds_retry_after_up() {
        let d = Decision {
            allowed: false,
            outcome: Outcome::Limited,
            limit: 100,
            window: Duration::from_secs(60),
            remaining: 0,
            reset: Duration::from_millis(14_001),
            retry_after: Some(Duration::from_millis(1_001)),
            over_quota: true,
        };
        assert_eq!(
            d.ratelimit_policy_header("api_key"),
            r#""api_key";q=100;w=60"#
        );
        assert_eq!(d.ratelimit_header("api_key"), r#""api_key";r=0;t=15"#);
        assert_eq!(d.retry_after_header().as_deref(), Some("2"));
        let exact = Decision {
            retry_after: Some(Duration::from_secs(3)),
            ..d
        };
        assert_eq!(exact.retry_after_header().as_deref(), Some("3"));
        assert_eq!(d.ratelimit_policy_header("a\"b"), r#""a\"b";q=100;w=60"#);
        assert_eq!(
            Decision {
                retry_after: None,
                ..d
            }
            .retry_after_header(),
            None
        );
    }
}
