//! Decisions for limits the lease manager cannot lease: a sliding window
//! (SLIDINGWINDOW) or a GCRA (GCRA), each decided by the ledger itself at
//! every request, exactly (docs/commands.md has both commands).
//!
//! A lease is a share of a token bucket's balance spent locally; a sliding
//! window or a GCRA lent out in pieces would not count what its definition
//! counts, so these are one ledger round trip per request, not a local
//! token.
//!
//! Neither command can be undone (there is no "return" of a sliding
//! window's hits or a GCRA's arrival time), so a request's descriptors of
//! these kinds are decided last, together, by one script (EVAL) that runs
//! atomically on the ledger: it peeks every key (`COUNT 0` / `TOKENS 0`);
//! when an enforced key cannot take its hits, nothing is charged and the
//! script answers that key's denial; otherwise it charges every key. So a
//! request is all or nothing across them too, with no window in which a
//! concurrent request sees a charge that is then taken back.
//!
//! Ledger keys are `{<domain>}:<policy name>@sliding_window:<entries>` and
//! `...@gcra:...`, apart from a token bucket's, so changing a limit's
//! algorithm in the file never meets the old key's type (WRONGTYPE). The
//! domain in braces is the key's hash tag (Redis Cluster's rule: only the
//! text between the first `{` and the next `}` is hashed), so every such
//! key of a domain is in one hash slot: over a ledger cluster the script's
//! keys stay on one node and the request stays atomic, at the price of one
//! group serving all of a domain's sliding windows and GCRAs.

use std::time::Duration;

use bytes::Bytes;
use leasehold_client::policy::Algorithm;
use leasehold_client::{Client, Decision, Outcome, Policy};
use leasehold_protocol::Reply;

/// The script: `KEYS` the ledger keys; `ARGV`, six per key: the command
/// (`SLIDINGWINDOW` or `GCRA`), its three parameters (the third unused by
/// SLIDINGWINDOW), the hits, and `1` when the key's policy enforces.
/// Answers `{0, reply_1, ..., reply_n}` when every key was charged, or
/// `{i, reply_i}` when key `i` (1-based) was denied and nothing charged.
/// `remaining` (field 3 of both replies) is what a call could admit now,
/// so a peek's `remaining >= hits` is exactly "the charge would pass".
const SCRIPT: &str = r"
local function run(i, hits)
  local o = (i - 1) * 6
  if ARGV[o + 1] == 'SLIDINGWINDOW' then
    return redis.call('SLIDINGWINDOW', KEYS[i], ARGV[o + 2], ARGV[o + 3], 'COUNT', hits)
  end
  return redis.call('GCRA', KEYS[i], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], 'TOKENS', hits)
end
for i = 1, #KEYS do
  local o = (i - 1) * 6
  local hits = tonumber(ARGV[o + 5])
  if ARGV[o + 6] == '1' and run(i, 0)[3] < hits then
    return {i, run(i, hits)}
  end
end
local out = {0}
for i = 1, #KEYS do
  out[i + 1] = run(i, tonumber(ARGV[(i - 1) * 6 + 5]))
end
return out
";

/// One descriptor to decide.
#[derive(Debug)]
pub struct Ask<'a> {
    /// Its policy as it decides now.
    pub policy: &'a Policy,
    /// [`Algorithm::SlidingWindow`] or [`Algorithm::Gcra`].
    pub algorithm: Algorithm,
    /// The ledger key (see [`ledger_key`]).
    pub key: Vec<u8>,
    /// Hits to charge (at least 1).
    pub hits: u64,
    /// Whether an over-quota answer denies ([`Policy::enforces`]).
    pub enforce: bool,
}

/// The ledger key of `entries` under a policy named `name` of `domain`
/// counted by `algorithm`: `{<domain>}:<name>@<algorithm>:<entries>`, the
/// domain its hash tag.
pub fn ledger_key(domain: &str, name: &str, algorithm: Algorithm, entries: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(domain.len() + name.len() + entries.len() + 22);
    for part in [b"{", domain.as_bytes(), b"}:", name.as_bytes(), b"@"] {
        k.extend_from_slice(part);
    }
    k.extend_from_slice(algorithm.name().as_bytes());
    k.push(b':');
    k.extend_from_slice(entries);
    k
}

/// What [`decide`] answers: per ask its decision (`None`: not decided,
/// because another was denied first), and the denied ask.
#[derive(Debug)]
pub struct Answer {
    /// `decisions[i]` answers `asks[i]`.
    pub decisions: Vec<Option<Decision>>,
    /// The ask denied (nothing was charged then), if any.
    pub denied: Option<usize>,
}

/// Decides every ask in one atomic script call (none: no call).
///
/// A policy in shadow, soft or canary mode (outside its share) is not
/// enforced: its over-quota answer is admitted (`ShadowLimited` /
/// `SoftOverQuota`) without being counted, as the commands count only
/// admitted hits. When the ledger cannot answer, each ask follows its
/// policy's `failure_mode`: `fail_open` admits (`Bypassed`; there is no
/// local static bucket for these), `fail_closed` denies (`FailedClosed`),
/// and the first fail-closed ask is the denied one.
pub async fn decide(client: &Client, asks: &[Ask<'_>]) -> Answer {
    if asks.is_empty() {
        return Answer {
            decisions: Vec::new(),
            denied: None,
        };
    }
    let mut args: Vec<Bytes> = vec![
        Bytes::from_static(b"EVAL"),
        Bytes::from_static(SCRIPT.as_bytes()),
        num(asks.len() as u64),
    ];
    args.extend(asks.iter().map(|a| Bytes::copy_from_slice(&a.key)));
    for a in asks {
        let p = a.policy;
        let secs = p.unit.as_secs().max(1);
        let (cmd, params) = match a.algorithm {
            Algorithm::SlidingWindow => (
                "SLIDINGWINDOW",
                [p.requests_per_unit, p.unit.as_millis() as u64, 0],
            ),
            // GCRA max_burst tokens_per_period period_s: max_burst + 1
            // requests at once, one every period / tokens_per_period.
            _ => ("GCRA", [p.burst - 1, p.requests_per_unit, secs]),
        };
        args.push(Bytes::from_static(cmd.as_bytes()));
        args.extend(params.map(num));
        // More hits than the limit's whole capacity never pass, whatever
        // the state: they travel as capacity + 1, which stays an exact
        // integer in the script's Lua numbers (doubles) where 2^63 would
        // not, and which the command refuses as a number out of range.
        let capacity = match a.algorithm {
            Algorithm::SlidingWindow => p.requests_per_unit,
            _ => p.burst,
        };
        args.push(num(a.hits.min(capacity.saturating_add(1))));
        args.push(Bytes::from_static(if a.enforce { b"1" } else { b"0" }));
    }
    let deadline = client.config().call_deadline;
    match client.call(&args, deadline).await {
        Ok(reply) => match answer(asks, &reply) {
            Some(a) => a,
            None => {
                tracing::warn!("unexpected reply to the sliding window / GCRA script: {reply:?}");
                failed(asks, leasehold_client::BypassReason::LedgerError)
            }
        },
        Err(e) => {
            let reason = crate::service::bypass_reason(&e);
            if reason == leasehold_client::BypassReason::LedgerError {
                tracing::warn!("sliding window / GCRA script refused: {e}");
            } else {
                tracing::debug!("sliding window / GCRA script not answered: {e}");
            }
            failed(asks, reason)
        }
    }
}

fn num(n: u64) -> Bytes {
    Bytes::from(n.to_string())
}

/// The script's reply as decisions; `None` when it has another shape.
fn answer(asks: &[Ask<'_>], reply: &Reply) -> Option<Answer> {
    let Reply::Array(items) = reply else {
        return None;
    };
    let Some(Reply::Int(first)) = items.first() else {
        return None;
    };
    let mut decisions: Vec<Option<Decision>> = asks.iter().map(|_| None).collect();
    if *first > 0 {
        let i = usize::try_from(*first - 1)
            .ok()
            .filter(|&i| i < asks.len())?;
        decisions[i] = Some(one(&asks[i], items.get(1)?)?);
        return Some(Answer {
            decisions,
            denied: Some(i),
        });
    }
    if items.len() != asks.len() + 1 {
        return None;
    }
    for (d, (a, r)) in decisions.iter_mut().zip(asks.iter().zip(&items[1..])) {
        *d = Some(one(a, r)?);
    }
    Some(Answer {
        decisions,
        denied: None,
    })
}

/// One command's reply as a decision: SLIDINGWINDOW's `[admitted, count,
/// remaining, retry_after_ms]` or GCRA's `[limited, limit, remaining,
/// retry_after_s, reset_after_s]`.
fn one(a: &Ask<'_>, reply: &Reply) -> Option<Decision> {
    let Reply::Array(f) = reply else {
        return None;
    };
    let ints: Vec<i64> = f
        .iter()
        .map(|r| match r {
            Reply::Int(i) => Some(*i),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let p = a.policy;
    let (admitted, remaining, retry_after, reset) = match (a.algorithm, ints.as_slice()) {
        (Algorithm::SlidingWindow, &[admitted, _, remaining, retry_ms]) => (
            admitted > 0,
            remaining,
            u64::try_from(retry_ms).ok().map(Duration::from_millis),
            // The window's hits have aged out at most two windows on; one
            // window is what the estimate mostly depends on.
            p.unit,
        ),
        (Algorithm::Gcra, &[limited, _, remaining, retry_s, reset_s]) => (
            limited == 0,
            remaining,
            u64::try_from(retry_s).ok().map(Duration::from_secs),
            Duration::from_secs(u64::try_from(reset_s).unwrap_or(0)),
        ),
        _ => return None,
    };
    let mut d = Decision {
        allowed: admitted,
        outcome: if admitted {
            Outcome::Allowed
        } else {
            Outcome::Limited
        },
        limit: p.requests_per_unit,
        window: p.unit,
        remaining: u64::try_from(remaining).unwrap_or(0),
        reset,
        retry_after: if admitted { None } else { retry_after },
        over_quota: !admitted,
    };
    if !admitted && !a.enforce {
        crate::service::not_enforced(p, &mut d);
    }
    Some(d)
}

/// Every ask's decision when the ledger did not answer.
fn failed(asks: &[Ask<'_>], reason: leasehold_client::BypassReason) -> Answer {
    let mut denied = None;
    let decisions = asks
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut d = crate::service::full(a.policy);
            crate::service::on_failure(a.policy, reason, &mut d);
            if !d.allowed && denied.is_none() {
                denied = Some(i);
            }
            Some(d)
        })
        .collect();
    Answer { decisions, denied }
}
