//! Rate-limit policies from YAML, validated.
//!
//! The YAML has the shape of Envoy's reference rate-limit service
//! configuration (`domain`, nested `descriptors` of `key`/`value`,
//! `rate_limit {unit, requests_per_unit}` or `rate_limit {unlimited: true}`,
//! `shadow_mode`), extended with
//! `burst`, `failure_mode`, `mode` (with `canary_percent` and `canary_by` for
//! `mode: canary`),
//! `fail_open_requests_per_unit`, `algorithm` and `sub_keys` (a hot key's
//! limit spread over that many ledger keys in different hash slots:
//! [`crate::subkey`]).
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: api_key                 # any value: one bucket per API key
//!     rate_limit: { unit: minute, requests_per_unit: 600 }
//!     burst: 100                   # bucket capacity (default: requests_per_unit)
//!     failure_mode: fail_open      # or fail_closed (default fail_open)
//!     mode: enforce                # or shadow, soft, canary (default enforce)
//!   - key: tenant
//!     value: acme
//!     descriptors:
//!       - key: path
//!         value: /pay
//!         rate_limit: { unit: second, requests_per_unit: 10 }
//!         failure_mode: fail_closed
//! ```
//!
//! Everything is checked at load; an error names the place, e.g.
//! `descriptors[1].rate_limit.unit: unknown unit "fortnight"`.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::commands::BucketParams;
use crate::subkey::share;
pub use crate::subkey::MAX_SUB_KEYS;

/// Index of a policy in its [`PolicySet`]; cheap to copy and to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PolicyId(pub(crate) usize);

impl PolicyId {
    /// The first policy of a set (sets built with [`PolicySet::from_policies`]
    /// number policies in order).
    pub const FIRST: PolicyId = PolicyId(0);

    /// The policy's position in its set's [`PolicySet::policies`] (0-based),
    /// for callers that keep something per policy in a `Vec`.
    pub fn index(self) -> usize {
        self.0
    }
}

/// What to do when the ledger cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMode {
    /// Admit up to a local static bucket (default twice the policy's rate).
    FailOpen,
    /// Deny.
    FailClosed,
}

/// How a policy's denials are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Deny over quota.
    Enforce,
    /// Never deny; count would-be denials (Envoy's `shadow_mode`).
    Shadow,
    /// Admit, but mark the decision over quota (for a warning header).
    Soft,
    /// Enforce on `percent` (1 to 99) of the keys or of the instances,
    /// picked by a fixed hash; the others are admitted over quota as in
    /// `Soft`.
    Canary {
        /// Share of keys or instances enforced, in percent.
        percent: u8,
        /// What the share is of.
        by: CanaryBy,
    },
}

/// What a canary's share is taken of (`canary_by` in YAML).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanaryBy {
    /// Of the keys (`key`, the default): FNV-1a of the policy's name and the
    /// key, mod 100, so every instance picks the same keys.
    Key,
    /// Of the instances (`instance`): FNV-1a of the policy's name and this
    /// process's instance id ([`PolicySet::set_instance`]; the host name
    /// until set), mod 100, held here, so an instance enforces for every
    /// key or for none.
    Instance {
        /// This instance's number, 0 to 99: enforced when below `percent`.
        number: u8,
    },
}

/// FNV-1a (64 bits) of `name`, a zero byte and `rest`, mod 100: a number
/// fixed for the pair, so a share `< percent` only grows with the percent.
fn share_number(name: &str, rest: &[u8]) -> u8 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_bytes().iter().chain(&[0u8]).chain(rest) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % 100) as u8
}

/// The host name (Linux's `/proc/sys/kernel/hostname`, else `$HOSTNAME`),
/// or empty: the instance id a [`PolicySet`] starts with.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// How a policy's limit is counted (`algorithm` in YAML).
///
/// Only [`Algorithm::TokenBucket`] can be leased: a lease is a share of a
/// token bucket's balance that a process spends locally. A sliding window
/// or a GCRA lent out in pieces would not count what its definition counts,
/// so callers decide those with one ledger call per decision
/// (SLIDINGWINDOW, GCRA; docs/commands.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// A token bucket of `burst` tokens refilled at `requests_per_unit` per
    /// `unit` (TOKENLEASE / TOKENRETURN); the default.
    #[default]
    TokenBucket,
    /// At most `requests_per_unit` hits in any sliding `unit`, estimated from
    /// two fixed windows (SLIDINGWINDOW; `burst` does not apply).
    SlidingWindow,
    /// The generic cell rate algorithm: one hit every `unit /
    /// requests_per_unit`, `burst` at once (GCRA, redis-cell's semantics).
    Gcra,
}

impl Algorithm {
    /// The name YAML gives it (`token_bucket`, `sliding_window`, `gcra`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::Gcra => "gcra",
        }
    }
}

/// One policy: a descriptor path with a rate limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// `key=value/key` path of descriptors, or the descriptor's `name`.
    pub name: String,
    /// Requests per `unit` (the quota).
    pub requests_per_unit: u64,
    /// The quota's window (from YAML: a second, minute, hour, day, week,
    /// month of 30 days or year of 365 days).
    pub unit: Duration,
    /// Bucket capacity (tokens); defaults to `requests_per_unit`.
    pub burst: u64,
    /// On ledger failure.
    pub failure_mode: FailureMode,
    /// Enforce, shadow or soft.
    pub mode: Mode,
    /// Rate of the local static bucket used while failing open (requests per
    /// `unit`); defaults to twice `requests_per_unit`, burst twice `burst`.
    pub fail_open_requests_per_unit: u64,
}

impl Policy {
    /// Whether an over-quota decision for `key` is denied: always under
    /// `Enforce`, never under `Shadow` and `Soft`, and under `Canary` for
    /// the keys (or on the instances) in its share ([`CanaryBy`]: a fixed
    /// hash below the percentage, so a key or an instance stays picked
    /// while the share only grows).
    pub fn enforces(&self, key: &[u8]) -> bool {
        match self.mode {
            Mode::Enforce => true,
            Mode::Shadow | Mode::Soft => false,
            Mode::Canary {
                percent,
                by: CanaryBy::Key,
            } => share_number(&self.name, key) < percent,
            Mode::Canary {
                percent,
                by: CanaryBy::Instance { number },
            } => number < percent,
        }
    }

    /// Sub-key `i`'s policy when this one is spread over `n` sub-keys
    /// ([`crate::subkey`]): the same policy, its burst, rate and fail-open
    /// rate each sub-key `i`'s [`share`] (at least 1 for the fail-open
    /// rate), so the `n` sub-keys' limits add up to this one's exactly.
    ///
    /// # Panics
    /// If `n` is 0 or `i >= n`.
    pub fn sub_key(&self, n: u32, i: u32) -> Policy {
        Policy {
            requests_per_unit: share(self.requests_per_unit, n, i),
            burst: share(self.burst, n, i),
            fail_open_requests_per_unit: share(self.fail_open_requests_per_unit, n, i).max(1),
            ..self.clone()
        }
    }

    /// The ledger bucket's parameters.
    pub fn bucket(&self) -> BucketParams {
        BucketParams {
            capacity: self.burst,
            rate: self.requests_per_unit,
            period_ms: self.unit.as_millis() as u64,
        }
    }
}

/// A loaded, validated policy file.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySet {
    /// The domain (prefixes every ledger key).
    pub domain: String,
    policies: Vec<Policy>,
    /// Per policy, the names of the limits it replaces (`replaces`).
    replaces: Vec<Vec<String>>,
    /// Per policy, how its limit is counted (`algorithm`).
    algorithms: Vec<Algorithm>,
    /// Per policy, how many sub-keys its limit is spread over (`sub_keys`).
    sub_keys: Vec<u32>,
    /// The `policy` label every policy of the set reports its metrics
    /// under (None: each its own name).
    metrics_label: Option<String>,
    tree: Vec<Node>,
}

#[derive(Debug, Clone, PartialEq)]
struct Node {
    key: String,
    value: Option<String>,
    policy: Option<PolicyId>,
    children: Vec<Node>,
}

/// A policy file that failed to load: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The place, e.g. `descriptors[1].rate_limit.unit` (empty for syntax errors).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for PolicyError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    domain: String,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    key: String,
    value: Option<String>,
    name: Option<String>,
    rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    shadow_mode: bool,
    burst: Option<u64>,
    failure_mode: Option<String>,
    mode: Option<String>,
    canary_percent: Option<u8>,
    canary_by: Option<String>,
    fail_open_requests_per_unit: Option<u64>,
    algorithm: Option<String>,
    sub_keys: Option<u32>,
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    unit: Option<String>,
    requests_per_unit: Option<u64>,
    #[serde(default)]
    unlimited: bool,
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<RawReplaces>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReplaces {
    name: String,
}

fn err(path: &str, message: impl Into<String>) -> PolicyError {
    PolicyError {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn unit(path: &str, text: &str) -> Result<Duration, PolicyError> {
    let secs = match text.to_ascii_lowercase().as_str() {
        "second" => 1,
        "minute" => 60,
        "hour" => 3600,
        "day" => 86_400,
        "week" => 7 * 86_400,
        // As the rate limit service's MONTH and YEAR are counted.
        "month" => 30 * 86_400,
        "year" => 365 * 86_400,
        _ => return Err(err(path, format!("unknown unit {text:?}"))),
    };
    Ok(Duration::from_secs(secs))
}

/// Checks a `sub_keys` setting: 1 to [`MAX_SUB_KEYS`], a token bucket's,
/// and no more than the burst or the rate, so every sub-key's share of
/// both is at least one token.
fn check_sub_keys(n: u32, algorithm: Algorithm, burst: u64, rate: u64) -> Result<(), String> {
    if !(1..=MAX_SUB_KEYS).contains(&n) {
        return Err(format!("must be 1 to {MAX_SUB_KEYS}"));
    }
    if n > 1 && algorithm != Algorithm::TokenBucket {
        let name = algorithm.name();
        return Err(format!(
            "applies to token_bucket only ({name} is decided by the ledger at one key)"
        ));
    }
    if u64::from(n) > burst.min(rate) {
        return Err(format!(
            "{n} is above the burst ({burst}) or requests_per_unit ({rate}): every sub-key needs at least one token of each"
        ));
    }
    Ok(())
}

impl PolicySet {
    /// Parses and validates a policy file.
    ///
    /// # Errors
    /// [`PolicyError`] naming the first bad place: YAML syntax and unknown
    /// fields (as the YAML crate reports them, with line and column), unknown
    /// units, modes or failure modes, zero rates, a burst of 0, `shadow_mode`
    /// contradicting `mode`, duplicate descriptors, `sub_keys` out of range
    /// (0, above [`MAX_SUB_KEYS`], above the burst or the rate, or on a
    /// sliding window or a GCRA).
    pub fn from_yaml(text: &str) -> Result<PolicySet, PolicyError> {
        let raw: RawFile = serde_norway::from_str(text).map_err(|e| err("", e.to_string()))?;
        if raw.domain.is_empty() {
            return Err(err("domain", "must not be empty"));
        }
        let mut set = PolicySet {
            domain: raw.domain,
            policies: Vec::new(),
            replaces: Vec::new(),
            algorithms: Vec::new(),
            sub_keys: Vec::new(),
            metrics_label: None,
            tree: Vec::new(),
        };
        set.tree = set.load_level(&raw.descriptors, "descriptors", "")?;
        set.set_instance(&host_name());
        Ok(set)
    }

    /// Reads and parses a policy file.
    ///
    /// # Errors
    /// I/O errors and [`PolicySet::from_yaml`]'s.
    pub fn from_file(path: &std::path::Path) -> Result<PolicySet, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err("", format!("{}: {e}", path.display())))?;
        PolicySet::from_yaml(&text)
    }

    fn load_level(
        &mut self,
        raw: &[RawDescriptor],
        at: &str,
        prefix: &str,
    ) -> Result<Vec<Node>, PolicyError> {
        let mut nodes: Vec<Node> = Vec::new();
        for (i, d) in raw.iter().enumerate() {
            let here = format!("{at}[{i}]");
            if d.key.is_empty() {
                return Err(err(&format!("{here}.key"), "must not be empty"));
            }
            if nodes.iter().any(|n| n.key == d.key && n.value == d.value) {
                return Err(err(&here, format!("duplicate descriptor {:?}", d.key)));
            }
            let step = match &d.value {
                Some(v) => format!("{}={v}", d.key),
                None => d.key.clone(),
            };
            let path = if prefix.is_empty() {
                step
            } else {
                format!("{prefix}/{step}")
            };
            let policy = match &d.rate_limit {
                Some(rl) if !rl.unlimited => Some(self.load_policy(d, rl, &here, &path)?),
                Some(rl) if !rl.replaces.is_empty() => {
                    let msg = "an unlimited descriptor replaces nothing (replaces needs a limit)";
                    return Err(err(&format!("{here}.rate_limit.replaces"), msg));
                }
                // `unlimited: true`: matched, and never limited.
                _ => {
                    let stray = d.burst.is_some()
                        || d.failure_mode.is_some()
                        || d.mode.is_some()
                        || d.canary_percent.is_some()
                        || d.canary_by.is_some()
                        || d.algorithm.is_some()
                        || d.sub_keys.is_some();
                    if stray {
                        return Err(err(
                            &here,
                            "burst, failure_mode, mode, canary_percent, canary_by, algorithm and sub_keys need a rate_limit",
                        ));
                    }
                    None
                }
            };
            let children =
                self.load_level(&d.descriptors, &format!("{here}.descriptors"), &path)?;
            nodes.push(Node {
                key: d.key.clone(),
                value: d.value.clone(),
                policy,
                children,
            });
        }
        Ok(nodes)
    }

    fn load_policy(
        &mut self,
        d: &RawDescriptor,
        rl: &RawRateLimit,
        here: &str,
        path: &str,
    ) -> Result<PolicyId, PolicyError> {
        let missing = |field: &str| {
            err(
                &format!("{here}.rate_limit.{field}"),
                "missing (or set unlimited: true)",
            )
        };
        let unit = unit(
            &format!("{here}.rate_limit.unit"),
            rl.unit.as_deref().ok_or_else(|| missing("unit"))?,
        )?;
        let requests_per_unit = rl
            .requests_per_unit
            .ok_or_else(|| missing("requests_per_unit"))?;
        if requests_per_unit == 0 {
            return Err(err(
                &format!("{here}.rate_limit.requests_per_unit"),
                "must be at least 1",
            ));
        }
        let burst = d.burst.unwrap_or(requests_per_unit);
        if burst == 0 {
            return Err(err(&format!("{here}.burst"), "must be at least 1"));
        }
        let failure_mode = match d.failure_mode.as_deref() {
            None | Some("fail_open") => FailureMode::FailOpen,
            Some("fail_closed") => FailureMode::FailClosed,
            Some(other) => {
                let msg = format!("unknown failure mode {other:?} (fail_open, fail_closed)");
                return Err(err(&format!("{here}.failure_mode"), msg));
            }
        };
        let mode = match d.mode.as_deref() {
            None if d.shadow_mode => Mode::Shadow,
            None | Some("enforce") => Mode::Enforce,
            Some("shadow") => Mode::Shadow,
            Some("soft") => Mode::Soft,
            Some("canary") => match d.canary_percent {
                Some(percent @ 1..=99) => Mode::Canary {
                    percent,
                    by: match d.canary_by.as_deref() {
                        None | Some("key") => CanaryBy::Key,
                        Some("instance") => CanaryBy::Instance { number: 0 },
                        Some(other) => {
                            let msg = format!("unknown canary_by {other:?} (key, instance)");
                            return Err(err(&format!("{here}.canary_by"), msg));
                        }
                    },
                },
                Some(_) => {
                    let msg = "must be 1 to 99 (0 is soft, 100 is enforce)";
                    return Err(err(&format!("{here}.canary_percent"), msg));
                }
                None => {
                    let msg = "canary needs canary_percent (1 to 99)";
                    return Err(err(&format!("{here}.mode"), msg));
                }
            },
            Some(other) => {
                let msg = format!("unknown mode {other:?} (enforce, shadow, soft, canary)");
                return Err(err(&format!("{here}.mode"), msg));
            }
        };
        if d.canary_percent.is_some() && !matches!(mode, Mode::Canary { .. }) {
            return Err(err(&format!("{here}.canary_percent"), "needs mode: canary"));
        }
        if d.canary_by.is_some() && !matches!(mode, Mode::Canary { .. }) {
            return Err(err(&format!("{here}.canary_by"), "needs mode: canary"));
        }
        if d.shadow_mode && mode != Mode::Shadow {
            return Err(err(&format!("{here}.shadow_mode"), "true contradicts mode"));
        }
        let fail_open = d
            .fail_open_requests_per_unit
            .unwrap_or(requests_per_unit.saturating_mul(2));
        if fail_open == 0 {
            return Err(err(
                &format!("{here}.fail_open_requests_per_unit"),
                "must be at least 1",
            ));
        }
        let name = match (&d.name, &rl.name) {
            (Some(a), Some(b)) if a != b => {
                let msg = format!("{b:?} contradicts the descriptor's name {a:?}");
                return Err(err(&format!("{here}.rate_limit.name"), msg));
            }
            (Some(n), _) | (None, Some(n)) => n.clone(),
            (None, None) => path.to_owned(),
        };
        let algorithm = match d.algorithm.as_deref() {
            None | Some("token_bucket") => Algorithm::TokenBucket,
            Some("sliding_window") => Algorithm::SlidingWindow,
            Some("gcra") => Algorithm::Gcra,
            Some(other) => {
                let msg =
                    format!("unknown algorithm {other:?} (token_bucket, sliding_window, gcra)");
                return Err(err(&format!("{here}.algorithm"), msg));
            }
        };
        if algorithm == Algorithm::SlidingWindow && d.burst.is_some() {
            let msg = "does not apply to sliding_window (its limit is requests_per_unit)";
            return Err(err(&format!("{here}.burst"), msg));
        }
        let sub_keys = d.sub_keys.unwrap_or(1);
        check_sub_keys(sub_keys, algorithm, burst, requests_per_unit)
            .map_err(|m| err(&format!("{here}.sub_keys"), m))?;
        let mut replaces = Vec::with_capacity(rl.replaces.len());
        for (j, r) in rl.replaces.iter().enumerate() {
            let at = format!("{here}.rate_limit.replaces[{j}].name");
            if r.name.is_empty() {
                return Err(err(&at, "must not be empty"));
            }
            if r.name == name {
                return Err(err(&at, "must not name this limit itself"));
            }
            replaces.push(r.name.clone());
        }
        self.replaces.push(replaces);
        self.algorithms.push(algorithm);
        self.sub_keys.push(sub_keys);
        self.policies.push(Policy {
            name,
            requests_per_unit,
            unit,
            burst,
            failure_mode,
            mode,
            fail_open_requests_per_unit: fail_open,
        });
        Ok(PolicyId(self.policies.len() - 1))
    }

    /// The policies, indexed by [`PolicyId`].
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// One policy.
    ///
    /// # Panics
    /// If `id` comes from another set.
    pub fn get(&self, id: PolicyId) -> &Policy {
        &self.policies[id.0]
    }

    /// The names of the limits policy `id` replaces (`rate_limit.replaces`):
    /// in a request that matches it, a descriptor whose policy has one of
    /// these names is not limited (envoyproxy/ratelimit's rule).
    ///
    /// # Panics
    /// If `id` comes from another set.
    pub fn replaces(&self, id: PolicyId) -> &[String] {
        &self.replaces[id.0]
    }

    /// How policy `id`'s limit is counted (`algorithm`; token bucket unless
    /// the file says otherwise).
    ///
    /// # Panics
    /// If `id` comes from another set.
    pub fn algorithm(&self, id: PolicyId) -> Algorithm {
        self.algorithms[id.0]
    }

    /// How many sub-keys policy `id`'s limit is spread over (`sub_keys`;
    /// 1, the one key, unless the file says otherwise): see
    /// [`crate::subkey`].
    ///
    /// # Panics
    /// If `id` comes from another set.
    pub fn sub_keys(&self, id: PolicyId) -> u32 {
        self.sub_keys[id.0]
    }

    /// The set with policy `id`'s limit spread over `n` sub-keys (as
    /// `sub_keys: n` in YAML), for sets built in code.
    ///
    /// # Errors
    /// As the YAML setting: `n` of 0 or above [`MAX_SUB_KEYS`], above the
    /// policy's burst or its `requests_per_unit`, or a policy that is not a
    /// token bucket.
    ///
    /// # Panics
    /// If `id` comes from another set.
    pub fn with_sub_keys(mut self, id: PolicyId, n: u32) -> Result<PolicySet, PolicyError> {
        let p = &self.policies[id.0];
        check_sub_keys(n, self.algorithms[id.0], p.burst, p.requests_per_unit)
            .map_err(|m| err(&format!("{}.sub_keys", p.name), m))?;
        self.sub_keys[id.0] = n;
        Ok(self)
    }

    /// Every policy's id, in order.
    pub fn ids(&self) -> impl Iterator<Item = PolicyId> {
        (0..self.policies.len()).map(PolicyId)
    }

    /// The policy named `name`.
    pub fn id(&self, name: &str) -> Option<PolicyId> {
        self.policies
            .iter()
            .position(|p| p.name == name)
            .map(PolicyId)
    }

    /// The policy for a descriptor list of `(key, value)` entries, matched as
    /// Envoy does: at each level an entry with the same key and value wins
    /// over one with the key alone; the policy is the one at the last entry.
    pub fn find(&self, descriptors: &[(&str, &str)]) -> Option<PolicyId> {
        let mut level = &self.tree;
        let mut found = None;
        for (key, value) in descriptors {
            let exact = level
                .iter()
                .find(|n| n.key == *key && n.value.as_deref() == Some(*value));
            let node =
                exact.or_else(|| level.iter().find(|n| n.key == *key && n.value.is_none()))?;
            found = node.policy;
            level = &node.children;
        }
        found
    }

    /// A set of policies built in code (for tests and embedding).
    pub fn from_policies(domain: &str, policies: Vec<Policy>) -> PolicySet {
        let tree = policies
            .iter()
            .enumerate()
            .map(|(i, p)| Node {
                key: p.name.clone(),
                value: None,
                policy: Some(PolicyId(i)),
                children: Vec::new(),
            })
            .collect();
        PolicySet {
            domain: domain.to_owned(),
            replaces: vec![Vec::new(); policies.len()],
            algorithms: vec![Algorithm::TokenBucket; policies.len()],
            sub_keys: vec![1; policies.len()],
            metrics_label: None,
            policies,
            tree,
        }
    }

    /// The set with every policy reporting its metrics (the `policy` label
    /// of `rate_limit_decisions_total` and `rate_limit_bypassed_total`)
    /// under `label` instead of its own name: for policies made on the fly,
    /// whose names would otherwise add series without bound.
    pub fn with_metrics_label(mut self, label: &str) -> PolicySet {
        self.metrics_label = Some(label.to_owned());
        self
    }

    /// Makes `id` this process's instance id for every canary by instance
    /// ([`CanaryBy::Instance`]): each such policy then enforces here when
    /// FNV-1a of its name and `id`, mod 100, is below its percentage. A set
    /// starts with the host name; processes sharing a host (several RLS
    /// instances) should each set their own, stable across restarts.
    pub fn set_instance(&mut self, id: &str) {
        for p in &mut self.policies {
            if let Mode::Canary {
                by: CanaryBy::Instance { number },
                ..
            } = &mut p.mode
            {
                *number = share_number(&p.name, id.as_bytes());
            }
        }
    }

    /// The `policy` label policy `id` reports its metrics under.
    pub fn metrics_label(&self, id: PolicyId) -> &str {
        self.metrics_label
            .as_deref()
            .unwrap_or(&self.policies[id.0].name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
domain: edge
descriptors:
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 600 }
    burst: 100
  - key: subnet
    rate_limit: { unit: second, requests_per_unit: 20 }
    shadow_mode: true
  - key: tenant
    value: acme
    descriptors:
      - key: path
        value: /pay
        rate_limit: { unit: SECOND, requests_per_unit: 10 }
        failure_mode: fail_closed
        mode: soft
      - key: path
        rate_limit: { unit: hour, requests_per_unit: 1000 }
"#;

    #[test]
    fn loads_the_envoy_shape_with_extensions() {
        let set = PolicySet::from_yaml(SAMPLE).unwrap();
        assert_eq!(set.domain, "edge");
        let api = set.get(set.find(&[("api_key", "k1")]).unwrap());
        assert_eq!(
            (api.requests_per_unit, api.burst, api.unit),
            (600, 100, Duration::from_secs(60))
        );
        assert_eq!(
            (api.failure_mode, api.mode, api.fail_open_requests_per_unit),
            (FailureMode::FailOpen, Mode::Enforce, 1200)
        );
        assert_eq!(
            api.bucket(),
            BucketParams {
                capacity: 100,
                rate: 600,
                period_ms: 60_000
            }
        );
        assert_eq!(
            set.get(set.find(&[("subnet", "10.0.0.0/24")]).unwrap())
                .mode,
            Mode::Shadow
        );
        let pay = set.get(set.find(&[("tenant", "acme"), ("path", "/pay")]).unwrap());
        assert_eq!(
            (pay.name.as_str(), pay.failure_mode, pay.mode),
            ("tenant=acme/path=/pay", FailureMode::FailClosed, Mode::Soft)
        );
        let other = set.get(set.find(&[("tenant", "acme"), ("path", "/x")]).unwrap());
        assert_eq!(
            (other.name.as_str(), other.requests_per_unit),
            ("tenant=acme/path", 1000)
        );
        assert_eq!(
            set.find(&[("tenant", "acme")]),
            None,
            "no rate_limit at that level"
        );
        assert_eq!(set.find(&[("tenant", "other"), ("path", "/pay")]), None);
        assert_eq!(set.policies().len(), 4);
    }

    fn load_err(text: &str) -> String {
        PolicySet::from_yaml(text).unwrap_err().to_string()
    }

    #[test]
    fn weeks_months_and_years_are_7_30_and_365_days() {
        let yaml = "domain: d\ndescriptors:\n  - key: w\n    rate_limit: {unit: week, requests_per_unit: 1}\n  - key: m\n    rate_limit: {unit: MONTH, requests_per_unit: 1}\n  - key: y\n    rate_limit: {unit: year, requests_per_unit: 1}\n";
        let set = PolicySet::from_yaml(yaml).unwrap();
        let days = |k: &str| set.get(set.find(&[(k, "x")]).unwrap()).unit.as_secs() / 86_400;
        assert_eq!((days("w"), days("m"), days("y")), (7, 30, 365));
    }

    #[test]
    fn errors_name_the_place() {
        let unit = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n";
        assert_eq!(
            load_err(unit),
            r#"descriptors[1].rate_limit.unit: unknown unit "fortnight""#
        );
        let nested = "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 0}\n";
        assert_eq!(
            load_err(nested),
            "descriptors[0].descriptors[0].rate_limit.requests_per_unit: must be at least 1"
        );
        let mode = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    failure_mode: fail_sometimes\n";
        assert!(load_err(mode)
            .starts_with("descriptors[0].failure_mode: unknown failure mode \"fail_sometimes\""));
        let contra = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    shadow_mode: true\n    mode: enforce\n";
        assert_eq!(
            load_err(contra),
            "descriptors[0].shadow_mode: true contradicts mode"
        );
        let rl = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        assert_eq!(
            PolicySet::from_yaml(&format!("{rl}    mode: canary\n    canary_percent: 10\n"))
                .unwrap()
                .policies()[0]
                .mode,
            Mode::Canary {
                percent: 10,
                by: CanaryBy::Key
            }
        );
        assert_eq!(
            load_err(&format!(
                "{rl}    mode: canary\n    canary_percent: 10\n    canary_by: host\n"
            )),
            "descriptors[0].canary_by: unknown canary_by \"host\" (key, instance)"
        );
        assert_eq!(
            load_err(&format!("{rl}    canary_by: instance\n")),
            "descriptors[0].canary_by: needs mode: canary"
        );
        assert_eq!(
            load_err(&format!("{rl}    mode: canary\n")),
            "descriptors[0].mode: canary needs canary_percent (1 to 99)"
        );
        assert_eq!(
            load_err(&format!("{rl}    mode: canary\n    canary_percent: 100\n")),
            "descriptors[0].canary_percent: must be 1 to 99 (0 is soft, 100 is enforce)"
        );
        assert_eq!(
            load_err(&format!("{rl}    canary_percent: 5\n")),
            "descriptors[0].canary_percent: needs mode: canary"
        );
        let unlimited = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n    descriptors:\n      - key: b\n        value: vip\n        rate_limit: {unlimited: true}\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 5}\n";
        let set = PolicySet::from_yaml(unlimited).unwrap();
        assert_eq!(set.find(&[("a", "x"), ("b", "vip")]), None, "unlimited");
        assert!(set.find(&[("a", "x"), ("b", "other")]).is_some());
        assert_eq!(set.policies().len(), 2);
        assert_eq!(
            load_err("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n"),
            "descriptors[0].rate_limit.requests_per_unit: missing (or set unlimited: true)"
        );
        let dup = "domain: d\ndescriptors:\n  - key: a\n  - key: a\n";
        assert_eq!(load_err(dup), "descriptors[1]: duplicate descriptor \"a\"");
        let unknown = "domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second, requests_per_unit: 1}\n";
        let msg = load_err(unknown);
        assert!(
            msg.contains("descriptors[0]") && msg.contains("unknown field `rate_limt`"),
            "{msg}"
        );
        assert_eq!(load_err("domain: ''\n"), "domain: must not be empty");
    }

    #[test]
    fn replaces_names_other_limits() {
        let text = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n      name: general\n  - key: b\n    rate_limit:\n      unit: minute\n      requests_per_unit: 100\n      replaces:\n        - name: general\n";
        let set = PolicySet::from_yaml(text).unwrap();
        let a = set.find(&[("a", "x")]).unwrap();
        let b = set.find(&[("b", "x")]).unwrap();
        assert_eq!(set.get(a).name, "general");
        assert_eq!(set.get(b).name, "b");
        assert_eq!(set.replaces(b), ["general".to_string()]);
        assert!(set.replaces(a).is_empty());
        let own = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}]}\n";
        assert_eq!(
            load_err(own),
            "descriptors[0].rate_limit.replaces[0].name: must not name this limit itself"
        );
        let empty = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}\n";
        assert_eq!(
            load_err(empty),
            "descriptors[0].rate_limit.replaces[0].name: must not be empty"
        );
        let unlimited = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, replaces: [{name: x}]}\n";
        assert_eq!(
            load_err(unlimited),
            "descriptors[0].rate_limit.replaces: an unlimited descriptor replaces nothing (replaces needs a limit)"
        );
        let both = "domain: d\ndescriptors:\n  - key: a\n    name: one\n    rate_limit: {unit: second, requests_per_unit: 1, name: two}\n";
        assert_eq!(
            load_err(both),
            "descriptors[0].rate_limit.name: \"two\" contradicts the descriptor's name \"one\""
        );
    }

    #[test]
    fn algorithm_is_chosen_per_limit() {
        let rl = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5}\n";
        let set = PolicySet::from_yaml(rl).unwrap();
        assert_eq!(set.algorithm(PolicyId(0)), Algorithm::TokenBucket);
        for (name, alg) in [
            ("token_bucket", Algorithm::TokenBucket),
            ("sliding_window", Algorithm::SlidingWindow),
            ("gcra", Algorithm::Gcra),
        ] {
            let set = PolicySet::from_yaml(&format!("{rl}    algorithm: {name}\n")).unwrap();
            assert_eq!(set.algorithm(PolicyId(0)), alg);
            assert_eq!(alg.name(), name);
        }
        assert_eq!(
            load_err(&format!("{rl}    algorithm: leaky_bucket\n")),
            "descriptors[0].algorithm: unknown algorithm \"leaky_bucket\" (token_bucket, sliding_window, gcra)"
        );
        assert_eq!(
            load_err(&format!("{rl}    algorithm: sliding_window\n    burst: 9\n")),
            "descriptors[0].burst: does not apply to sliding_window (its limit is requests_per_unit)"
        );
        assert_eq!(
            PolicySet::from_yaml(&format!("{rl}    algorithm: gcra\n    burst: 9\n"))
                .unwrap()
                .policies()[0]
                .burst,
            9
        );
        assert_eq!(
            load_err("domain: d\ndescriptors:\n  - key: a\n    algorithm: gcra\n"),
            "descriptors[0]: burst, failure_mode, mode, canary_percent, canary_by, algorithm and sub_keys need a rate_limit"
        );
    }

    #[test]
    fn sub_keys_spread_a_limit_and_are_checked() {
        let rl = "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 100}\n    burst: 1000\n";
        let set = PolicySet::from_yaml(rl).unwrap();
        assert_eq!(set.sub_keys(PolicyId(0)), 1, "the one key by default");
        let set = PolicySet::from_yaml(&format!("{rl}    sub_keys: 16\n")).unwrap();
        assert_eq!(set.sub_keys(PolicyId(0)), 16);
        let p = set.get(PolicyId(0));
        let (first, last) = (p.sub_key(16, 0), p.sub_key(16, 15));
        assert_eq!(
            (
                first.burst,
                first.requests_per_unit,
                first.fail_open_requests_per_unit
            ),
            (63, 7, 13)
        );
        assert_eq!((last.burst, last.requests_per_unit), (62, 6));
        assert_eq!((first.name.as_str(), first.unit), ("tenant", p.unit));
        let sum = |f: fn(&Policy) -> u64| (0..16).map(|i| f(&p.sub_key(16, i))).sum::<u64>();
        assert_eq!(
            (sum(|q| q.burst), sum(|q| q.requests_per_unit)),
            (1000, 100)
        );
        assert_eq!(
            load_err(&format!("{rl}    sub_keys: 0\n")),
            "descriptors[0].sub_keys: must be 1 to 256"
        );
        assert_eq!(
            load_err(&format!("{rl}    sub_keys: 257\n")),
            "descriptors[0].sub_keys: must be 1 to 256"
        );
        assert_eq!(
            load_err(&format!("{rl}    sub_keys: 101\n")),
            "descriptors[0].sub_keys: 101 is above the burst (1000) or requests_per_unit (100): every sub-key needs at least one token of each"
        );
        let small_burst = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 100}\n    burst: 4\n    sub_keys: 5\n";
        assert!(
            load_err(small_burst).starts_with("descriptors[0].sub_keys: 5 is above the burst (4)")
        );
        assert_eq!(
            load_err(&format!("{rl}    sub_keys: 4\n    algorithm: gcra\n")),
            "descriptors[0].sub_keys: applies to token_bucket only (gcra is decided by the ledger at one key)"
        );
        assert!(
            PolicySet::from_yaml(&format!("{rl}    sub_keys: 1\n    algorithm: gcra\n")).is_ok()
        );
        assert_eq!(
            load_err("domain: d\ndescriptors:\n  - key: a\n    sub_keys: 2\n"),
            "descriptors[0]: burst, failure_mode, mode, canary_percent, canary_by, algorithm and sub_keys need a rate_limit"
        );
        // Sets built in code are checked alike.
        let code = PolicySet::from_policies("d", vec![p.clone()]);
        assert_eq!(code.sub_keys(PolicyId(0)), 1);
        assert_eq!(
            code.clone()
                .with_sub_keys(PolicyId(0), 8)
                .unwrap()
                .sub_keys(PolicyId(0)),
            8
        );
        assert_eq!(
            code.with_sub_keys(PolicyId(0), 0).unwrap_err().to_string(),
            "tenant.sub_keys: must be 1 to 256"
        );
    }

    #[test]
    fn a_canary_enforces_on_its_share_of_keys_stably() {
        let mut p = PolicySet::from_yaml(
            "domain: d\ndescriptors:\n  - key: api\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
        )
        .unwrap()
        .policies()[0]
        .clone();
        let mut picked = |pct| {
            p.mode = Mode::Canary {
                percent: pct,
                by: CanaryBy::Key,
            };
            (0..10_000)
                .filter(|i| p.enforces(format!("k{i}").as_bytes()))
                .collect::<Vec<_>>()
        };
        let ten = picked(10);
        let fifty = picked(50);
        assert!(
            (800..1200).contains(&ten.len()),
            "{} of 10 000 at 10%",
            ten.len()
        );
        assert!(
            (4600..5400).contains(&fifty.len()),
            "{} at 50%",
            fifty.len()
        );
        assert!(
            ten.iter().all(|k| fifty.contains(k)),
            "growing keeps the picked keys"
        );
        p.mode = Mode::Enforce;
        assert!(p.enforces(b"x"));
        p.mode = Mode::Soft;
        assert!(!p.enforces(b"x"));
    }
    #[test]
    fn a_canary_by_instance_enforces_on_its_share_of_instances_stably() {
        let yaml = |pct: u8| {
            format!(
                "domain: d\ndescriptors:\n  - key: api\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n    mode: canary\n    canary_percent: {pct}\n    canary_by: instance\n"
            )
        };
        // Of 1000 instance ids, each enforces for every key or for none.
        let enforcing = |pct: u8| {
            let mut set = PolicySet::from_yaml(&yaml(pct)).unwrap();
            (0..1000)
                .filter(|i| {
                    set.set_instance(&format!("rls-{i}:8081"));
                    let p = &set.policies()[0];
                    let all = (0..50).all(|k| p.enforces(format!("k{k}").as_bytes()));
                    let none = (0..50).all(|k| !p.enforces(format!("k{k}").as_bytes()));
                    assert!(all || none, "instance {i} splits its keys");
                    all
                })
                .collect::<Vec<_>>()
        };
        let (ten, fifty) = (enforcing(10), enforcing(50));
        assert!(
            (60..140).contains(&ten.len()),
            "{} of 1000 at 10%",
            ten.len()
        );
        assert!((430..570).contains(&fifty.len()), "{} at 50%", fifty.len());
        assert!(
            ten.iter().all(|i| fifty.contains(i)),
            "growing keeps the picked"
        );
        // The same id picks the same way in another set (another process).
        let mut a = PolicySet::from_yaml(&yaml(50)).unwrap();
        let mut b = PolicySet::from_yaml(&yaml(50)).unwrap();
        a.set_instance("rls-7:8081");
        b.set_instance("rls-7:8081");
        assert_eq!(a.policies()[0].mode, b.policies()[0].mode);
    }
}
