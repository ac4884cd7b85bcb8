//! leasehold-rls: Envoy's rate limit service
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`) whose
//! decisions come from the Leasehold lease manager: local buckets leased
//! from a Leasehold ledger in the background, so a decision is a local
//! token in the steady state, not a ledger round trip per descriptor.
//!
//! ```text
//!  Envoy ──gRPC──> service::Service::should_rate_limit
//!                    │ limits::Shared::snapshot (the config in force)
//!                    │ per descriptor: PolicySet::find, its LeaseManager
//!                    │   decide() x hits  (all or nothing over descriptors)
//!                    v
//!                  LeaseManager ──TOKENLEASE/TOKENRETURN (background)──> ledger
//!  limits::watch: the config file polled; a changed file rebuilt into new
//!  Limits keeping unchanged policies' managers; a bad one refused by line
//! ```
//!
//! # Layout
//! In request order:
//! - [`service`]: the gRPC method, descriptors to decisions, statuses and
//!   headers.
//! - [`adhoc`]: managers for the limits Envoy sends in a descriptor
//!   (`limit` overrides), made on first use.
//! - [`direct`]: sliding windows and GCRAs, decided by the ledger in one
//!   atomic script per request.
//! - [`limits`]: the limits in force (a manager per policy), their reload.
//! - [`config`]: the YAML file (one document per domain), errors by line.
//!
//! Emergency overrides published on the ledger's pub/sub are parsed, kept
//! and followed by `leasehold_client::overrides` (the implementation every
//! lease manager shares); [`limits`] rebuilds the limits from them.
//!
//! `main.rs` is wiring: flags, logging, the ledger client, the gRPC server
//! with the health service, the Prometheus listener, shutdown.

#![warn(missing_docs)]

pub mod adhoc;
pub mod config;
pub mod direct;
pub mod limits;
pub mod service;
