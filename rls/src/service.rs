//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`: a
//! request's descriptors decided together against the limits in force.
//!
//! Per descriptor: the policy its entries match (as Envoy's reference
//! service matches them), and its hits (`hits_addend` of the descriptor,
//! else of the request; 0 counts as 1). The lease manager's key is the
//! descriptor's entries as `key=value` joined by `/`, so each value of a
//! `key`-only descriptor gets its own bucket.
//!
//! **All or nothing.** Descriptors are charged in order, one token per hit
//! from the policy's lease manager. When one is denied, every token this
//! request took from the others is put back ([`LeaseManager::put_back`]),
//! so none of them is charged and their statuses say `OK` with the
//! balance they keep. (A concurrent request may see those tokens missing
//! for the microseconds in between, never a lasting charge.) A descriptor
//! whose hits exceed its policy's burst is denied without charging
//! anything: no wait would ever admit it.
//!
//! **Negative hits** (`is_negative_hits`) are given back to the ledger
//! (TOKENRETURN, one call) after the charges, whether or not those were
//! denied, and are never denied themselves.
//!
//! The response carries, for Envoy to add: the IETF draft's
//! `RateLimit-Policy` and `RateLimit` of the most constrained limited
//! descriptor (the denied one, else the one with the least remaining), and
//! `Retry-After` (whole seconds, rounded up) when denied, and
//! `RateLimit-Warning: "<policy>"` for each descriptor a `mode: soft` policy
//! (or a `mode: canary` policy, outside its share of keys) admitted over
//! quota. A `mode: shadow` policy admits over quota silently
//! (counted as `rate_limit_decisions_total{outcome="shadow_limited"}`).

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use leasehold_client::{Decision, LeaseManager, Outcome, Policy, PolicyId};
use metrics::{counter, histogram, Counter, Histogram};
use tonic::{Request, Response, Status};

use crate::limits::{Domain, Shared};

/// Where decisions come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Decide {
    /// The lease manager's local buckets, leased in the background.
    #[default]
    Leases,
    /// One all-or-nothing TOKENLEASE per descriptor per request, straight
    /// to the ledger (the model of services that call their store on every
    /// request; kept for comparisons). A ledger failure follows the
    /// policy's `failure_mode`.
    LedgerPerRequest,
}

/// The gRPC service: decides against the limits in `Shared`.
///
/// Metrics: `leasehold_rls_requests_total{code="ok"|"over_limit"|"error"}`
/// and `leasehold_rls_request_seconds` (histogram, the whole
/// ShouldRateLimit call).
#[derive(Debug, Clone)]
pub struct Service {
    limits: Shared,
    decide: Decide,
    ok: Counter,
    over: Counter,
    error: Counter,
    seconds: Histogram,
}

impl Service {
    /// A service deciding against `limits` (swapped whole by reloads), from
    /// `decide`.
    pub fn new(limits: Shared, decide: Decide) -> Service {
        Service {
            limits,
            decide,
            ok: counter!("leasehold_rls_requests_total", "code" => "ok"),
            over: counter!("leasehold_rls_requests_total", "code" => "over_limit"),
            error: counter!("leasehold_rls_requests_total", "code" => "error"),
            seconds: histogram!("leasehold_rls_request_seconds"),
        }
    }
}

#[tonic::async_trait]
impl RateLimitService for Service {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let limits = self.limits.snapshot();
        let domain = limits.domain(&request.get_ref().domain);
        let res = should_rate_limit(domain, request.get_ref(), self.decide).await;
        self.seconds.record(started.elapsed().as_secs_f64());
        match &res {
            Ok(r) if r.overall_code == Code::OverLimit as i32 => self.over.increment(1),
            Ok(_) => self.ok.increment(1),
            Err(_) => self.error.increment(1),
        }
        res.map(Response::new)
    }
}

/// What a request asks of one descriptor.
enum Plan {
    /// No policy matches: OK, unlimited.
    Unlimited,
    /// Take `hits` tokens under `id`.
    Charge {
        id: PolicyId,
        key: Vec<u8>,
        hits: u64,
    },
    /// Give `hits` tokens back under `id`.
    Return {
        id: PolicyId,
        key: Vec<u8>,
        hits: u64,
    },
}

/// One descriptor's result.
struct Verdict {
    /// The decision (`None`: unlimited).
    decision: Option<Decision>,
    /// Tokens this request took locally (put back if another is denied).
    taken: u64,
    /// Tokens this request took from the ledger directly (returned if
    /// another is denied).
    taken_from_ledger: u64,
    policy_name: String,
}

/// Decides `req` against `domain` (`None`: the domain is not configured,
/// and every descriptor is unlimited, as in Envoy's reference service),
/// from `decide`.
///
/// # Errors
/// `INVALID_ARGUMENT` for an empty domain, an empty descriptor list, or a
/// descriptor with no entries.
pub async fn should_rate_limit(
    domain: Option<&Domain>,
    req: &RateLimitRequest,
    decide: Decide,
) -> Result<RateLimitResponse, Status> {
    if req.domain.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit domain must not be empty",
        ));
    }
    if req.descriptors.is_empty() {
        return Err(Status::invalid_argument(
            "rate limit descriptor list must not be empty",
        ));
    }
    let mut plans = Vec::with_capacity(req.descriptors.len());
    for (i, d) in req.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return Err(Status::invalid_argument(format!(
                "descriptor {i} has no entries"
            )));
        }
        plans.push(plan(domain, d, req.hits_addend));
    }
    if let Some(domain) = domain {
        drop_replaced(domain, &mut plans);
    }
    // Charges first, in order, stopping at the first denial.
    let mut slots: Vec<Option<Verdict>> = plans.iter().map(|_| None).collect();
    let mut denied: Option<usize> = None;
    for (i, plan) in plans.iter().enumerate() {
        let v = match plan {
            Plan::Unlimited => unlimited(),
            Plan::Return { .. } => continue,
            Plan::Charge { id, key, hits } => {
                let domain = domain.expect("a policy implies its domain");
                match decide {
                    Decide::Leases => charge(domain, *id, key, *hits).await,
                    Decide::LedgerPerRequest => charge_ledger(domain, *id, key, *hits).await,
                }
            }
        };
        let refused = v.decision.is_some_and(|d| !d.allowed);
        slots[i] = Some(v);
        if refused {
            denied = Some(i);
            break;
        }
    }
    if denied.is_some() {
        // Undo every token this request took, so only the denial stands.
        for (plan, v) in plans.iter().zip(slots.iter_mut()) {
            let (Plan::Charge { id, key, .. }, Some(v)) = (plan, v) else {
                continue;
            };
            let domain = domain.expect("a policy implies its domain");
            let m = domain.manager(*id);
            if v.taken > 0 {
                m.put_back(PolicyId::FIRST, key, v.taken);
            }
            if v.taken_from_ledger > 0 {
                if let Err(e) = m
                    .return_to_ledger(PolicyId::FIRST, key, v.taken_from_ledger)
                    .await
                {
                    tracing::warn!("tokens of a denied request not returned: {e}");
                }
            }
            if let Some(d) = v.decision.as_mut() {
                d.remaining = d.remaining.saturating_add(v.taken + v.taken_from_ledger);
            }
            (v.taken, v.taken_from_ledger) = (0, 0);
        }
    }
    // Then the tokens given back (whether or not the charges were denied),
    // and the limits of descriptors a denial left undecided.
    let mut verdicts = Vec::with_capacity(plans.len());
    for (plan, v) in plans.iter().zip(slots) {
        let v = match (v, plan) {
            (Some(v), _) => v,
            (None, Plan::Return { id, key, hits }) => {
                let domain = domain.expect("a policy implies its domain");
                give_back(domain, *id, key, *hits).await
            }
            (None, plan) => undecided(domain, plan),
        };
        verdicts.push(v);
    }
    Ok(response(&verdicts, denied))
}

/// `replaces`, as envoyproxy/ratelimit applies it: a descriptor whose
/// policy is named in the `replaces` of another descriptor's policy in the
/// same request is not limited (OK, nothing charged or given back).
fn drop_replaced(domain: &Domain, plans: &mut [Plan]) {
    let replaced: Vec<&str> = plans
        .iter()
        .filter_map(Plan::policy)
        .flat_map(|id| domain.set.replaces(id).iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    for plan in plans.iter_mut() {
        if plan
            .policy()
            .is_some_and(|id| replaced.contains(&domain.policy(id).name.as_str()))
        {
            *plan = Plan::Unlimited;
        }
    }
}

impl Plan {
    /// The policy it charges or gives back to.
    fn policy(&self) -> Option<PolicyId> {
        match self {
            Plan::Unlimited => None,
            Plan::Charge { id, .. } | Plan::Return { id, .. } => Some(*id),
        }
    }
}

/// The descriptor's policy, manager key and hits.
fn plan(domain: Option<&Domain>, d: &RateLimitDescriptor, request_hits: u32) -> Plan {
    let entries: Vec<(&str, &str)> = d
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    let Some(id) = domain.and_then(|dom| dom.set.find(&entries).filter(|&id| !dom.disabled(id)))
    else {
        return Plan::Unlimited;
    };
    let hits = d
        .hits_addend
        .map_or(u64::from(request_hits), |h| h.value)
        .max(1);
    let mut key = Vec::new();
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            key.push(b'/');
        }
        key.extend_from_slice(k.as_bytes());
        key.push(b'=');
        key.extend_from_slice(v.as_bytes());
    }
    if d.is_negative_hits {
        Plan::Return { id, key, hits }
    } else {
        Plan::Charge { id, key, hits }
    }
}

/// Takes `hits` tokens, one decision each, stopping at the first denial.
async fn charge(domain: &Domain, id: PolicyId, key: &[u8], hits: u64) -> Verdict {
    let policy = domain.policy(id);
    let m: &LeaseManager = domain.manager(id);
    if hits > policy.burst {
        return Verdict {
            decision: Some(never(policy)),
            taken: 0,
            taken_from_ledger: 0,
            policy_name: policy.name.clone(),
        };
    }
    // The common case: the local bucket holds them all (one CAS).
    if let Some(d) = m.try_take(PolicyId::FIRST, key, hits) {
        return Verdict {
            decision: Some(d),
            taken: hits,
            taken_from_ledger: 0,
            policy_name: policy.name.clone(),
        };
    }
    let mut taken = 0;
    let mut last = None;
    for _ in 0..hits {
        let d = m.decide(PolicyId::FIRST, key).await;
        if d.outcome == Outcome::Allowed {
            taken += 1;
        } else {
            tracing::debug!(policy = %policy.name, outcome = ?d.outcome, "not a local token");
        }
        last = Some(d);
        if !d.allowed {
            break;
        }
    }
    Verdict {
        decision: last,
        taken,
        taken_from_ledger: 0,
        policy_name: policy.name.clone(),
    }
}

/// Takes `hits` tokens from the ledger in one all-or-nothing call.
async fn charge_ledger(domain: &Domain, id: PolicyId, key: &[u8], hits: u64) -> Verdict {
    let policy = domain.policy(id);
    let mut v = Verdict {
        decision: Some(never(policy)),
        taken: 0,
        taken_from_ledger: 0,
        policy_name: policy.name.clone(),
    };
    if hits > policy.burst {
        return v;
    }
    let d = v.decision.as_mut().expect("set above");
    match domain
        .manager(id)
        .take_from_ledger(PolicyId::FIRST, key, hits)
        .await
    {
        Ok(lease) => {
            d.remaining = lease.remaining;
            d.reset = lease.reset_after;
            if lease.granted >= hits {
                (d.allowed, d.outcome, d.over_quota) = (true, Outcome::Allowed, false);
                v.taken_from_ledger = hits;
            } else {
                d.retry_after = lease.retry_after;
            }
        }
        Err(e) => {
            let reason = if e.is_timeout() {
                leasehold_client::BypassReason::LedgerTimeout
            } else if e.is_circuit_open() {
                leasehold_client::BypassReason::CircuitOpen
            } else {
                leasehold_client::BypassReason::LedgerError
            };
            if policy.failure_mode == leasehold_client::FailureMode::FailOpen {
                (d.allowed, d.outcome, d.over_quota) = (true, Outcome::Bypassed(reason), false);
            } else {
                d.outcome = Outcome::FailedClosed(reason);
            }
        }
    }
    if d.outcome == Outcome::Limited && !policy.enforces(key) {
        d.allowed = true;
        d.retry_after = None;
        d.outcome = if policy.mode == leasehold_client::Mode::Shadow {
            Outcome::ShadowLimited
        } else {
            Outcome::SoftOverQuota
        };
    }
    v
}

/// Gives `hits` tokens back to the ledger; never denied. A failed return
/// is logged: the ledger refills on its own, so it costs only quota.
async fn give_back(domain: &Domain, id: PolicyId, key: &[u8], hits: u64) -> Verdict {
    let policy = domain.policy(id);
    let remaining = match domain
        .manager(id)
        .return_to_ledger(PolicyId::FIRST, key, hits)
        .await
    {
        Ok(balance) => balance,
        Err(e) => {
            tracing::warn!(policy = %policy.name, "negative hits not returned: {e}");
            0
        }
    };
    let mut d = full(policy);
    d.remaining = remaining;
    Verdict {
        decision: Some(d),
        taken: 0,
        taken_from_ledger: 0,
        policy_name: policy.name.clone(),
    }
}

fn unlimited() -> Verdict {
    Verdict {
        decision: None,
        taken: 0,
        taken_from_ledger: 0,
        policy_name: String::new(),
    }
}

/// A descriptor after a denied one: its limit, not decided.
fn undecided(domain: Option<&Domain>, plan: &Plan) -> Verdict {
    match (domain, plan) {
        (Some(domain), Plan::Charge { id, key, .. } | Plan::Return { id, key, .. }) => {
            let policy = domain.policy(*id);
            let mut d = full(policy);
            d.remaining = domain.manager(*id).remaining(PolicyId::FIRST, key);
            d.reset = refill_time(policy, d.remaining);
            Verdict {
                decision: Some(d),
                taken: 0,
                taken_from_ledger: 0,
                policy_name: policy.name.clone(),
            }
        }
        _ => unlimited(),
    }
}

/// How long the policy's bucket takes from `remaining` tokens to full: the
/// missing tokens times `unit / requests_per_unit`, rounded up to the ns.
fn refill_time(p: &Policy, remaining: u64) -> Duration {
    let missing = u128::from(p.burst.saturating_sub(remaining));
    let ns = (missing * p.unit.as_nanos()).div_ceil(u128::from(p.requests_per_unit.max(1)));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// An allowed decision reporting the policy's full burst.
fn full(p: &Policy) -> Decision {
    Decision {
        allowed: true,
        outcome: Outcome::Allowed,
        limit: p.requests_per_unit,
        window: p.unit,
        remaining: p.burst,
        reset: Duration::ZERO,
        retry_after: None,
        over_quota: false,
    }
}

/// The denial of a request for more hits than the policy's burst: no wait
/// would admit it, so there is no `retry_after`.
fn never(p: &Policy) -> Decision {
    Decision {
        allowed: false,
        outcome: Outcome::Limited,
        remaining: 0,
        over_quota: true,
        ..full(p)
    }
}

/// The protobuf unit of a policy's window (`UNKNOWN` for a window Envoy's
/// enum has no name for).
fn unit(window: Duration) -> Unit {
    match window.as_secs() {
        1 => Unit::Second,
        60 => Unit::Minute,
        3600 => Unit::Hour,
        86_400 => Unit::Day,
        604_800 => Unit::Week,
        _ => Unit::Unknown,
    }
}

fn pb_duration(d: Duration) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

/// A structured-field string (see [`leasehold_client::decision::sf_string`]).
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    leasehold_client::decision::sf_string(&mut out, s);
    out
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..HeaderValue::default()
    }
}

fn response(verdicts: &[Verdict], denied: Option<usize>) -> RateLimitResponse {
    let statuses = verdicts
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let Some(d) = v.decision else {
                return DescriptorStatus {
                    code: Code::Ok as i32,
                    ..DescriptorStatus::default()
                };
            };
            let over = Some(i) == denied;
            DescriptorStatus {
                code: if over { Code::OverLimit } else { Code::Ok } as i32,
                current_limit: Some(RateLimit {
                    name: v.policy_name.clone(),
                    requests_per_unit: u32::try_from(d.limit).unwrap_or(u32::MAX),
                    unit: unit(d.window) as i32,
                }),
                limit_remaining: u32::try_from(d.remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(pb_duration(d.reset)),
                ..DescriptorStatus::default()
            }
        })
        .collect();
    // The headers describe the tightest limit: the denied one, else the
    // limited descriptor with the least remaining.
    let tightest = denied.or_else(|| {
        verdicts
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((i, v.decision?.remaining)))
            .min_by_key(|&(_, r)| r)
            .map(|(i, _)| i)
    });
    let mut headers = Vec::new();
    if let Some(i) = tightest {
        let v = &verdicts[i];
        let d = v.decision.expect("only decided descriptors are picked");
        headers.push(header(
            "RateLimit-Policy",
            d.ratelimit_policy_header(&v.policy_name),
        ));
        headers.push(header("RateLimit", d.ratelimit_header(&v.policy_name)));
        if denied.is_some() {
            if let Some(ra) = d.retry_after_header() {
                headers.push(header("Retry-After", ra));
            }
        }
    }
    // Soft mode: admitted over quota, and said so.
    for v in verdicts {
        if v.decision
            .is_some_and(|d| d.outcome == Outcome::SoftOverQuota)
        {
            headers.push(header("RateLimit-Warning", sf_string(&v.policy_name)));
        }
    }
    RateLimitResponse {
        overall_code: if denied.is_some() {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32,
        statuses,
        response_headers_to_add: headers,
        ..RateLimitResponse::default()
    }
}
