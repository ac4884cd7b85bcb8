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
use leasehold_client::policy::Algorithm;
use leasehold_client::{
    BypassReason, Decision, FailureMode, LeaseManager, Mode, Outcome, Policy, PolicyId,
};
use metrics::{counter, histogram, Counter, Histogram};
use tonic::{Request, Response, Status};

use crate::adhoc::AdHoc;
use crate::direct;
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
    adhoc: AdHoc,
    decide: Decide,
    ok: Counter,
    over: Counter,
    error: Counter,
    seconds: Histogram,
}

impl Service {
    /// A service deciding against `limits` (swapped whole by reloads), from
    /// `decide`, with descriptors' `limit` overrides decided by `adhoc`.
    pub fn new(limits: Shared, adhoc: AdHoc, decide: Decide) -> Service {
        Service {
            limits,
            adhoc,
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
        let res = should_rate_limit(domain, &self.adhoc, request.get_ref(), self.decide).await;
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
    /// Take `hits` tokens from `m` (a configured token bucket's manager, or
    /// an override's; `id` is the configured policy, for `replaces`).
    Charge {
        m: LeaseManager,
        id: Option<PolicyId>,
        key: Vec<u8>,
        hits: u64,
    },
    /// Give `hits` tokens back to `m`'s ledger bucket.
    Return {
        m: LeaseManager,
        id: Option<PolicyId>,
        key: Vec<u8>,
        hits: u64,
    },
    /// A configured sliding window or GCRA: decided by the ledger, after
    /// every charge ([`crate::direct`]). Negative hits give nothing back.
    Direct {
        id: PolicyId,
        key: Vec<u8>,
        hits: u64,
        negative: bool,
    },
    /// An override of 0 requests per unit: denied, nothing charged.
    Deny(Box<Policy>),
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

impl Verdict {
    fn new(decision: Decision, p: &Policy) -> Verdict {
        Verdict {
            decision: Some(decision),
            taken: 0,
            taken_from_ledger: 0,
            policy_name: p.name.clone(),
        }
    }
}

/// Decides `req` against `domain` (`None`: the domain is not configured,
/// and every descriptor is unlimited, as in Envoy's reference service),
/// from `decide`; a descriptor's `limit` override decides with a manager of
/// `adhoc`.
///
/// # Errors
/// `INVALID_ARGUMENT` for an empty domain, an empty descriptor list, a
/// descriptor with no entries, or a `limit` override whose unit is
/// `UNKNOWN` or not a unit at all.
pub async fn should_rate_limit(
    domain: Option<&Domain>,
    adhoc: &AdHoc,
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
        plans.push(plan(domain, adhoc, i, d, req.hits_addend)?);
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
            Plan::Return { .. } | Plan::Direct { .. } => continue,
            Plan::Deny(p) => Verdict::new(never(p), p),
            Plan::Charge { m, key, hits, .. } => match decide {
                Decide::Leases => charge(m, key, *hits).await,
                Decide::LedgerPerRequest => charge_ledger(m, key, *hits).await,
            },
        };
        let refused = v.decision.is_some_and(|d| !d.allowed);
        slots[i] = Some(v);
        if refused {
            denied = Some(i);
            break;
        }
    }
    // Then the sliding windows and GCRAs, together, when nothing was denied.
    if let (None, Some(domain)) = (denied, domain) {
        denied = decide_direct(domain, &plans, &mut slots).await;
    }
    if denied.is_some() {
        undo(&plans, &mut slots).await;
    }
    // Then the tokens given back (whether or not the charges were denied),
    // and the limits of descriptors a denial left undecided.
    let mut verdicts = Vec::with_capacity(plans.len());
    for (plan, v) in plans.iter().zip(slots) {
        let v = match (v, plan) {
            (Some(v), _) => v,
            (None, Plan::Return { m, key, hits, .. }) => give_back(m, key, *hits).await,
            (None, plan) => undecided(domain, plan),
        };
        verdicts.push(v);
    }
    Ok(response(&verdicts, denied))
}

/// Decides the request's sliding windows and GCRAs in one atomic ledger
/// call; returns the denied descriptor's index, if any.
async fn decide_direct(
    domain: &Domain,
    plans: &[Plan],
    slots: &mut [Option<Verdict>],
) -> Option<usize> {
    let mut at = Vec::new();
    let mut asks = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        if let Plan::Direct {
            id,
            key,
            hits,
            negative: false,
        } = plan
        {
            let policy = domain.policy(*id);
            let algorithm = domain.set.algorithm(*id);
            at.push(i);
            asks.push(direct::Ask {
                policy,
                algorithm,
                key: direct::ledger_key(&domain.set.domain, &policy.name, algorithm, key),
                hits: *hits,
                enforce: policy.enforces(key),
            });
        }
    }
    let answer = direct::decide(domain.client(), &asks).await;
    for ((&i, ask), d) in at.iter().zip(&asks).zip(answer.decisions) {
        if let Some(d) = d {
            slots[i] = Some(Verdict::new(d, ask.policy));
        }
    }
    answer.denied.map(|j| at[j])
}

/// Undoes every token this request took, so only the denial stands.
async fn undo(plans: &[Plan], slots: &mut [Option<Verdict>]) {
    for (plan, v) in plans.iter().zip(slots.iter_mut()) {
        let (Plan::Charge { m, key, .. }, Some(v)) = (plan, v) else {
            continue;
        };
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

/// `replaces`, as envoyproxy/ratelimit applies it: a descriptor whose
/// policy is named in the `replaces` of another descriptor's policy in the
/// same request is not limited (OK, nothing charged or given back). An
/// override's limit has no name: it neither replaces nor is replaced.
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
    /// The configured policy it charges or gives back to.
    fn policy(&self) -> Option<PolicyId> {
        match self {
            Plan::Unlimited | Plan::Deny(_) => None,
            Plan::Charge { id, .. } | Plan::Return { id, .. } => *id,
            Plan::Direct { id, .. } => Some(*id),
        }
    }
}

/// The descriptor's entries as the manager's key: `key=value` joined by `/`.
fn entries_key(d: &RateLimitDescriptor) -> Vec<u8> {
    let mut key = Vec::new();
    for (i, e) in d.entries.iter().enumerate() {
        if i > 0 {
            key.push(b'/');
        }
        key.extend_from_slice(e.key.as_bytes());
        key.push(b'=');
        key.extend_from_slice(e.value.as_bytes());
    }
    key
}

/// The window and name of an override's unit (`envoy.type.v3.RateLimitUnit`;
/// 7 is the service's `WEEK`, which that enum lacks). A month counts 30
/// days and a year 365. `None` for `UNKNOWN` and numbers no unit has.
fn override_unit(unit: i32) -> Option<(Duration, &'static str)> {
    const DAY: u64 = 86_400;
    let (secs, name) = match unit {
        1 => (1, "second"),
        2 => (60, "minute"),
        3 => (3600, "hour"),
        4 => (DAY, "day"),
        5 => (30 * DAY, "month"),
        6 => (365 * DAY, "year"),
        7 => (7 * DAY, "week"),
        _ => return None,
    };
    Some((Duration::from_secs(secs), name))
}

/// The descriptor's plan: its override's limit, else the configured policy
/// its entries match; its manager key and hits.
///
/// An override applies whether or not the entries match a configured
/// limit, and in place of the one they match (envoyproxy/ratelimit's
/// `GetLimit`); in a domain not configured it is ignored, as there.
fn plan(
    domain: Option<&Domain>,
    adhoc: &AdHoc,
    i: usize,
    d: &RateLimitDescriptor,
    request_hits: u32,
) -> Result<Plan, Status> {
    let Some(dom) = domain else {
        return Ok(Plan::Unlimited);
    };
    let hits = d
        .hits_addend
        .map_or(u64::from(request_hits), |h| h.value)
        .max(1);
    let key = entries_key(d);
    let (m, id) = if let Some(o) = d.limit {
        let Some((unit, unit_name)) = override_unit(o.unit) else {
            return Err(Status::invalid_argument(format!(
                "descriptor {i}: limit override unit {} is not SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR",
                o.unit
            )));
        };
        let policy = AdHoc::policy(u64::from(o.requests_per_unit), unit, unit_name);
        if o.requests_per_unit == 0 {
            // envoyproxy/ratelimit denies every hit of a limit of 0.
            return Ok(Plan::Deny(Box::new(policy)));
        }
        (adhoc.manager(&dom.set.domain, policy), None)
    } else {
        let entries: Vec<(&str, &str)> = d
            .entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
            .collect();
        let Some(id) = dom.set.find(&entries).filter(|&id| !dom.disabled(id)) else {
            return Ok(Plan::Unlimited);
        };
        if dom.set.algorithm(id) != Algorithm::TokenBucket {
            return Ok(Plan::Direct {
                id,
                key,
                hits,
                negative: d.is_negative_hits,
            });
        }
        (dom.manager(id).clone(), Some(id))
    };
    Ok(if d.is_negative_hits {
        Plan::Return { m, id, key, hits }
    } else {
        Plan::Charge { m, id, key, hits }
    })
}

/// Takes `hits` tokens, one decision each, stopping at the first denial.
async fn charge(m: &LeaseManager, key: &[u8], hits: u64) -> Verdict {
    let policy = m.policy(PolicyId::FIRST);
    if hits > policy.burst {
        return Verdict::new(never(policy), policy);
    }
    // The common case: the local bucket holds them all (one CAS).
    if let Some(d) = m.try_take(PolicyId::FIRST, key, hits) {
        return Verdict {
            taken: hits,
            ..Verdict::new(d, policy)
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

/// The bypass reason a ledger error stands for.
pub(crate) fn bypass_reason(e: &leasehold_client::Error) -> BypassReason {
    if e.is_timeout() {
        BypassReason::LedgerTimeout
    } else if e.is_circuit_open() {
        BypassReason::CircuitOpen
    } else {
        BypassReason::LedgerError
    }
}

/// `d` when the ledger could not decide: admitted under `fail_open`,
/// denied under `fail_closed`.
pub(crate) fn on_failure(p: &Policy, reason: BypassReason, d: &mut Decision) {
    if p.failure_mode == FailureMode::FailOpen {
        (d.allowed, d.outcome, d.over_quota) = (true, Outcome::Bypassed(reason), false);
    } else {
        (d.allowed, d.outcome) = (false, Outcome::FailedClosed(reason));
    }
}

/// An over-quota `d` of a policy that does not enforce it for this key:
/// admitted, as shadow (silently) or soft (with a warning header).
pub(crate) fn not_enforced(p: &Policy, d: &mut Decision) {
    d.allowed = true;
    d.retry_after = None;
    d.outcome = if p.mode == Mode::Shadow {
        Outcome::ShadowLimited
    } else {
        Outcome::SoftOverQuota
    };
}

/// Takes `hits` tokens from the ledger in one all-or-nothing call.
async fn charge_ledger(m: &LeaseManager, key: &[u8], hits: u64) -> Verdict {
    let policy = m.policy(PolicyId::FIRST);
    let mut v = Verdict::new(never(policy), policy);
    if hits > policy.burst {
        return v;
    }
    let d = v.decision.as_mut().expect("set above");
    match m.take_from_ledger(PolicyId::FIRST, key, hits).await {
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
        Err(e) => on_failure(policy, bypass_reason(&e), d),
    }
    if d.outcome == Outcome::Limited && !policy.enforces(key) {
        not_enforced(policy, d);
    }
    v
}

/// Gives `hits` tokens back to the ledger; never denied. A failed return
/// is logged: the ledger refills on its own, so it costs only quota.
async fn give_back(m: &LeaseManager, key: &[u8], hits: u64) -> Verdict {
    let policy = m.policy(PolicyId::FIRST);
    let remaining = match m.return_to_ledger(PolicyId::FIRST, key, hits).await {
        Ok(balance) => balance,
        Err(e) => {
            tracing::warn!(policy = %policy.name, "negative hits not returned: {e}");
            0
        }
    };
    let mut d = full(policy);
    d.remaining = remaining;
    Verdict::new(d, policy)
}

fn unlimited() -> Verdict {
    Verdict {
        decision: None,
        taken: 0,
        taken_from_ledger: 0,
        policy_name: String::new(),
    }
}

/// A descriptor a denial left undecided (or a sliding window's or GCRA's
/// negative hits, which give nothing back): its limit, not decided.
fn undecided(domain: Option<&Domain>, plan: &Plan) -> Verdict {
    match (domain, plan) {
        (_, Plan::Charge { m, key, .. } | Plan::Return { m, key, .. }) => {
            let policy = m.policy(PolicyId::FIRST);
            let mut d = full(policy);
            d.remaining = m.remaining(PolicyId::FIRST, key);
            d.reset = refill_time(policy, d.remaining);
            Verdict::new(d, policy)
        }
        (Some(domain), Plan::Direct { id, .. }) => {
            let policy = domain.policy(*id);
            Verdict::new(full(policy), policy)
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
pub(crate) fn full(p: &Policy) -> Decision {
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
        2_592_000 => Unit::Month,
        31_536_000 => Unit::Year,
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
