//! ShouldRateLimit over gRPC with a tonic client, against `leasehold-rls`
//! (a child process) leasing from a real Leasehold ledger on loopback.
//!
//! Limits are per hour so the ledger refills nothing within a test: a
//! descriptor's `limit_remaining` is then exactly its burst minus the hits
//! charged (the lease manager reports its local tokens plus the ledger's
//! balance at its last lease).

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{rate_limit::Unit, Code};
use leasehold_testkit::{call, text, wait_for, Reply};
use support::*;

const LIMITS: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: path
    value: /pay
    rate_limit: { unit: hour, requests_per_unit: 2 }
";

/// Runs `f` with an rls on `yaml` and its ledger's port, at most 60 s.
async fn with_rls<F, Fut>(yaml: &str, f: F)
where
    F: FnOnce(Rls, u16) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = Scratch::new("grpc");
    let ledger = Ledger::start();
    let rls = Rls::start(&dir, ledger.port, yaml, &[]);
    tokio::time::timeout(Duration::from_secs(60), f(rls, ledger.port))
        .await
        .expect("the test finishes within 60 s");
}

/// The ledger's own balance for `key` (TOKENLEASE peek).
fn ledger_balance(port: u16, key: &str, cap: u64, rate: u64, period_ms: u64) -> i64 {
    let (c, r, p) = (cap.to_string(), rate.to_string(), period_ms.to_string());
    match call(port, &["TOKENLEASE", key, &c, &r, &p, "0"]) {
        Some(Reply::Array(a)) => text(&a[1]).parse().expect("an integer"),
        other => panic!("TOKENLEASE peek: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_descriptor_leaves_the_others_uncharged() {
    with_rls(LIMITS, |rls, _| async move {
        let mut c = rls.client().await;
        let both = || {
            request(
                "edge",
                vec![desc(&[("user", "alice")]), desc(&[("path", "/pay")])],
            )
        };
        let r = ask(&mut c, both()).await.unwrap();
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(codes(&r), [(Code::Ok, 9), (Code::Ok, 1)]);
        let limit = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("user", 10, Unit::Hour as i32)
        );
        // 1 token missing at 10 an hour: 360 s until whole again.
        assert_eq!(r.statuses[0].duration_until_reset.unwrap().seconds, 360);
        assert_eq!(header(&r, "RateLimit"), Some(r#""path=/pay";r=1;t=1800"#));
        assert_eq!(
            header(&r, "RateLimit-Policy"),
            Some(r#""path=/pay";q=2;w=3600"#)
        );
        assert_eq!(header(&r, "Retry-After"), None);

        let r = ask(&mut c, both()).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 8), (Code::Ok, 0)]);

        // /pay is spent: the request is denied, and alice's token, taken
        // first, is put back (her status shows the 8 she keeps).
        let r = ask(&mut c, both()).await.unwrap();
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(codes(&r), [(Code::Ok, 8), (Code::OverLimit, 0)]);
        let retry: u64 = header(&r, "Retry-After").unwrap().parse().unwrap();
        assert!((1..=1800).contains(&retry), "Retry-After {retry}");
        assert!(header(&r, "RateLimit")
            .unwrap()
            .starts_with(r#""path=/pay";r=0;"#));

        // Denied again with the limited descriptor first: the later one is
        // not decided at all, and still reports 8.
        let r = ask(
            &mut c,
            request(
                "edge",
                vec![desc(&[("path", "/pay")]), desc(&[("user", "alice")])],
            ),
        )
        .await
        .unwrap();
        assert_eq!(codes(&r), [(Code::OverLimit, 0), (Code::Ok, 8)]);
        // 2 tokens missing at 10 an hour.
        assert_eq!(r.statuses[1].duration_until_reset.unwrap().seconds, 720);

        // Alice alone: charged from the 8 the denials left her.
        let r = ask(&mut c, request("edge", vec![desc(&[("user", "alice")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 7)]);
        // Another user has a bucket of her own.
        let r = ask(&mut c, request("edge", vec![desc(&[("user", "bob")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 9)]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_addend_charges_that_many_tokens_and_more_than_the_burst_is_never_admitted() {
    with_rls(LIMITS, |rls, _| async move {
        let mut c = rls.client().await;
        let mut req = request("edge", vec![desc(&[("user", "carol")])]);
        req.hits_addend = 3;
        let r = ask(&mut c, req.clone()).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 7)]);
        // The descriptor's own hits_addend wins over the request's.
        req.descriptors = vec![desc_hits(&[("user", "carol")], 4, false)];
        let r = ask(&mut c, req.clone()).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 3)]);
        // 4 more than the 3 left: denied, and the 3 it took are put back.
        let r = ask(&mut c, req.clone()).await.unwrap();
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(codes(&r), [(Code::OverLimit, 3)]);
        // More than the burst of 10 can never be admitted: denied at once,
        // with no Retry-After, and nothing charged.
        req.descriptors = vec![desc_hits(&[("user", "dave")], 11, false)];
        let r = ask(&mut c, req).await.unwrap();
        assert_eq!(codes(&r), [(Code::OverLimit, 0)]);
        assert_eq!(header(&r, "Retry-After"), None);
        let r = ask(&mut c, request("edge", vec![desc(&[("user", "dave")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 9)]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_hits_give_tokens_back_to_the_ledger() {
    with_rls(LIMITS, |rls, ledger| async move {
        let mut c = rls.client().await;
        // 3 of the first lease's 5: above its renewal watermark, so no
        // lease runs while the ledger is read below.
        let mut req = request("edge", vec![desc(&[("user", "erin")])]);
        req.hits_addend = 3;
        let r = ask(&mut c, req).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 7)]);
        let key = "edge:user:user=erin";
        let before = ledger_balance(ledger, key, 10, 10, 3_600_000);
        assert_eq!(before, 5, "one lease of 5");
        let r = ask(
            &mut c,
            request("edge", vec![desc_hits(&[("user", "erin")], 3, true)]),
        )
        .await
        .unwrap();
        assert_eq!(overall(&r), Code::Ok);
        let after = ledger_balance(ledger, key, 10, 10, 3_600_000);
        assert_eq!(after, before + 3, "the ledger got 3 tokens back");
        assert_eq!(codes(&r), [(Code::Ok, after as u32)]);
        // Given back even when the request's charges are denied (3 of a
        // burst of 2 is never admitted).
        let r = ask(
            &mut c,
            request(
                "edge",
                vec![
                    desc_hits(&[("path", "/pay")], 3, false),
                    desc_hits(&[("user", "erin")], 1, true),
                ],
            ),
        )
        .await
        .unwrap();
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(codes(&r), [(Code::OverLimit, 0), (Code::Ok, 9)]);
        // The ledger caps a return at the burst.
        let r = ask(
            &mut c,
            request("edge", vec![desc_hits(&[("user", "erin")], 50, true)]),
        )
        .await
        .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 10)]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_domain_or_descriptor_is_unlimited_and_empty_requests_are_refused() {
    with_rls(LIMITS, |rls, _| async move {
        let mut c = rls.client().await;
        let r = ask(&mut c, request("nope", vec![desc(&[("user", "x")])]))
            .await
            .unwrap();
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(codes(&r), [(Code::Ok, 0)]);
        assert_eq!(r.statuses[0].current_limit, None);
        assert!(r.response_headers_to_add.is_empty());
        let r = ask(
            &mut c,
            request(
                "edge",
                vec![desc(&[("path", "/other")]), desc(&[("user", "x")])],
            ),
        )
        .await
        .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 0), (Code::Ok, 9)]);
        assert_eq!(r.statuses[0].current_limit, None);

        let e = ask(&mut c, request("edge", vec![])).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert_eq!(e.message(), "rate limit descriptor list must not be empty");
        let e = ask(&mut c, request("", vec![desc(&[("user", "x")])]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        let e = ask(&mut c, request("edge", vec![desc(&[])]))
            .await
            .unwrap_err();
        assert_eq!(
            (e.code(), e.message()),
            (tonic::Code::InvalidArgument, "descriptor 0 has no entries")
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_10_mb_request_is_refused_and_the_service_keeps_serving() {
    with_rls(LIMITS, |rls, _| async move {
        let mut c = rls.client().await;
        let huge = "x".repeat(10 << 20);
        let e = ask(&mut c, request("edge", vec![desc(&[("user", &huge)])]))
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::OutOfRange, "{e:?}");
        assert!(e.message().contains("too large"), "{e:?}");
        // The same channel, and a new one, are served as before.
        let r = ask(&mut c, request("edge", vec![desc(&[("user", "y")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 9)]);
        let mut fresh = rls.client().await;
        let r = ask(&mut fresh, request("edge", vec![desc(&[("user", "y")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 8)]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_config_applies_keeping_unchanged_limits_and_a_bad_one_is_refused_by_line() {
    with_rls(LIMITS, |rls, _| async move {
        let mut c = rls.client().await;
        let alice = || request("edge", vec![desc(&[("user", "alice")])]);
        let team = || request("edge", vec![desc(&[("team", "red")])]);
        for want in [9, 8] {
            assert_eq!(codes(&ask(&mut c, alice()).await.unwrap()), [(Code::Ok, want)]);
        }
        assert_eq!(
            ask(&mut c, team()).await.unwrap().statuses[0].current_limit,
            None
        );
        // A new limit, and a changed one (/pay); `user` is unchanged.
        let changed = LIMITS.replace("requests_per_unit: 2", "requests_per_unit: 5")
            + "  - key: team\n    rate_limit: { unit: hour, requests_per_unit: 3 }\n";
        std::fs::write(&rls.config, &changed).unwrap();
        let mut applied = None;
        for _ in 0..100 {
            let r = ask(&mut c, team()).await.unwrap();
            if r.statuses[0].current_limit.is_some() {
                applied = Some(r);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let r = applied.expect("the changed file is applied within 5 s");
        assert_eq!(codes(&r), [(Code::Ok, 2)]);
        // Alice's bucket kept its state through the reload.
        assert_eq!(codes(&ask(&mut c, alice()).await.unwrap()), [(Code::Ok, 7)]);
        let pay = ask(&mut c, request("edge", vec![desc(&[("path", "/pay")])]))
            .await
            .unwrap();
        assert_eq!(pay.statuses[0].current_limit.as_ref().unwrap().requests_per_unit, 5);

        // A bad file (line 9) is refused by line; the config in force stays.
        let bad = changed.replace("unit: hour, requests_per_unit: 3", "unit: fortnight, requests_per_unit: 3");
        std::fs::write(&rls.config, bad).unwrap();
        wait_for("the refusal is logged", Duration::from_secs(5), || {
            rls.log_text().contains("refused: line")
        });
        let log = rls.log_text();
        assert!(
            log.contains(r#"refused: line 9: descriptors[2].rate_limit.unit: unknown unit "fortnight"; the previous config stays in force"#),
            "{log}"
        );
        assert_eq!(codes(&ask(&mut c, team()).await.unwrap()), [(Code::Ok, 1)]);
        assert_eq!(codes(&ask(&mut c, alice()).await.unwrap()), [(Code::Ok, 6)]);
    })
    .await;
}

/// GET /metrics from 127.0.0.1:`port` (Prometheus text).
fn metrics_text(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the metrics port");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_serving_and_metrics_count_requests_and_decisions() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let dir = Scratch::new("health");
    let ledger = Ledger::start();
    let metrics = leasehold_testkit::free_port();
    let rls = Rls::start(
        &dir,
        ledger.port,
        LIMITS,
        &["--metrics-port", &metrics.to_string()],
    );
    let run = async {
        let channel =
            tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{}", rls.port))
                .unwrap()
                .connect()
                .await
                .unwrap();
        let mut h = HealthClient::new(channel);
        for service in ["", "envoy.service.ratelimit.v3.RateLimitService"] {
            let r = h
                .check(HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .unwrap()
                .into_inner();
            assert_eq!(r.status, ServingStatus::Serving as i32, "{service:?}");
        }
        let mut c = rls.client().await;
        for _ in 0..3 {
            ask(&mut c, request("edge", vec![desc(&[("path", "/pay")])]))
                .await
                .unwrap();
        }
        // Two overrides of different limits: one set of series for both.
        for n in [3, 4] {
            ask(
                &mut c,
                request("edge", vec![desc_limit(&[("path", "/pay")], n, HOUR)]),
            )
            .await
            .unwrap();
        }
        let text = metrics_text(metrics);
        assert!(!text.contains("policy=\"override:"), "{text}");
        for line in [
            r#"leasehold_rls_requests_total{code="ok"} 4"#,
            r#"leasehold_rls_requests_total{code="over_limit"} 1"#,
            r#"rate_limit_decisions_total{policy="override",outcome="allowed"} 2"#,
            r#"rate_limit_decisions_total{policy="path=/pay",outcome="allowed"} 2"#,
            r#"rate_limit_decisions_total{policy="path=/pay",outcome="limited"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing in:\n{text}"
            );
        }
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_admits_silently_and_soft_admits_with_a_warning() {
    let limits = "\
domain: edge
descriptors:
  - key: shadowed
    rate_limit: { unit: hour, requests_per_unit: 1 }
    mode: shadow
  - key: soft
    rate_limit: { unit: hour, requests_per_unit: 1 }
    mode: soft
  - key: enforced
    rate_limit: { unit: hour, requests_per_unit: 1 }
";
    with_rls(limits, |rls, _| async move {
        let mut c = rls.client().await;
        for key in ["shadowed", "soft", "enforced"] {
            let one = || request("edge", vec![desc(&[(key, "k")])]);
            let r = ask(&mut c, one()).await.unwrap();
            assert_eq!(codes(&r), [(Code::Ok, 0)], "{key}: the one token");
            assert_eq!(header(&r, "RateLimit-Warning"), None);
            let r = ask(&mut c, one()).await.unwrap();
            match key {
                "shadowed" => {
                    assert_eq!(overall(&r), Code::Ok);
                    assert_eq!(header(&r, "RateLimit-Warning"), None);
                }
                "soft" => {
                    assert_eq!(overall(&r), Code::Ok);
                    assert_eq!(header(&r, "RateLimit-Warning"), Some(r#""soft""#));
                }
                _ => {
                    assert_eq!(overall(&r), Code::OverLimit);
                    assert!(header(&r, "Retry-After").is_some());
                }
            }
        }
    })
    .await;
}

/// Subscribers of `channel` on the ledger (PUBSUB NUMSUB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_override_published_on_the_ledger_reaches_every_instance_and_expires() {
    const CHANNEL: &str = "leasehold-rls:override";
    let limits = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1 }
";
    let dir = Scratch::new("override");
    let ledger = Ledger::start();
    let a = Rls::start(&dir, ledger.port, limits, &[]);
    let dir_b = Scratch::new("override");
    let b = Rls::start(&dir_b, ledger.port, limits, &[]);
    let port = ledger.port;
    let run = async {
        wait_for("both instances subscribe", Duration::from_secs(10), || {
            subscribers(port, CHANNEL) == 2
        });
        let (mut ca, mut cb) = (a.client().await, b.client().await);
        let alice = || request("edge", vec![desc(&[("user", "alice")])]);
        assert_eq!(overall(&ask(&mut ca, alice()).await.unwrap()), Code::Ok);
        for c in [&mut ca, &mut cb] {
            assert_eq!(overall(&ask(c, alice()).await.unwrap()), Code::OverLimit);
        }

        // Disabled for 1.5 s on both instances, then back by itself.
        let published = std::time::Instant::now();
        let n = call(port, &["PUBLISH", CHANNEL, "edge user disable 1500"]);
        assert_eq!(n, Some(Reply::Int(2)));
        for c in [&mut ca, &mut cb] {
            loop {
                let r = ask(c, alice()).await.unwrap();
                if overall(&r) == Code::Ok {
                    assert_eq!(r.statuses[0].current_limit, None, "unlimited");
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let took = published.elapsed();
        assert!(took < Duration::from_secs(3), "override took {took:?}");
        for c in [&mut ca, &mut cb] {
            loop {
                if overall(&ask(c, alice()).await.unwrap()) == Code::OverLimit {
                    break;
                }
                assert!(
                    published.elapsed() < Duration::from_secs(5),
                    "never expired"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }

        // Widened 5x: a fresh bucket of 5 under its own name, then cleared.
        call(port, &["PUBLISH", CHANNEL, "edge user widen 5 60000"]);
        let r = eventually(&mut ca, alice, Code::Ok).await;
        let limit = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit),
            ("user@x5", 5)
        );
        assert_eq!(r.statuses[0].limit_remaining, 4);
        call(port, &["PUBLISH", CHANNEL, "edge user clear"]);
        eventually(&mut ca, alice, Code::OverLimit).await;

        // A bad message, or one for a policy not configured, changes nothing.
        call(port, &["PUBLISH", CHANNEL, "edge user pause 5"]);
        call(port, &["PUBLISH", CHANNEL, "edge nobody disable 5000"]);
        wait_for("the refusals are logged", Duration::from_secs(3), || {
            a.log_text().matches("refused").count() == 2
        });
        let log = a.log_text();
        assert!(
            log.contains(
                "override \"edge nobody disable 5000\" refused: no such domain and policy"
            ),
            "{log}"
        );
        assert_eq!(
            overall(&ask(&mut ca, alice()).await.unwrap()),
            Code::OverLimit
        );
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("within 60 s");
}

/// Asks `req()` every 20 ms until the overall code is `want` (at most 3 s).
async fn eventually(
    c: &mut envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<tonic::transport::Channel>,
    req: impl Fn() -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest,
    want: Code,
) -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse {
    let start = std::time::Instant::now();
    loop {
        let r = ask(c, req()).await.unwrap();
        if overall(&r) == want {
            return r;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "not {want:?} within 3 s: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Calls of `command` the ledger has executed (INFO commandstats).
fn ledger_calls(port: u16, command: &str) -> u64 {
    let info = call(port, &["INFO", "commandstats"]).map_or_else(String::new, |r| text(&r));
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_per_request_mode_calls_the_ledger_per_descriptor_and_stays_all_or_nothing() {
    let dir = Scratch::new("direct");
    let ledger = Ledger::start();
    let rls = Rls::start(&dir, ledger.port, LIMITS, &["--ledger-per-request"]);
    let port = ledger.port;
    let run = async {
        let mut c = rls.client().await;
        let both = || {
            request(
                "edge",
                vec![desc(&[("user", "alice")]), desc(&[("path", "/pay")])],
            )
        };
        assert_eq!(
            codes(&ask(&mut c, both()).await.unwrap()),
            [(Code::Ok, 9), (Code::Ok, 1)]
        );
        assert_eq!(
            codes(&ask(&mut c, both()).await.unwrap()),
            [(Code::Ok, 8), (Code::Ok, 0)]
        );
        let r = ask(&mut c, both()).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 8), (Code::OverLimit, 0)]);
        assert!(header(&r, "Retry-After").is_some());
        // Every descriptor was a ledger call, and alice's token of the
        // denied request went back to the ledger.
        assert_eq!(ledger_calls(port, "tokenlease"), 6);
        assert_eq!(ledger_calls(port, "tokenreturn"), 1);
        assert_eq!(
            ledger_balance(port, "edge:user:user=alice", 10, 10, 3_600_000),
            8
        );
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_denies_on_its_share_of_keys_and_warns_on_the_others() {
    let limits = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1 }
    mode: canary
    canary_percent: 30
";
    let policy = leasehold_client::PolicySet::from_yaml(limits)
        .unwrap()
        .policies()[0]
        .clone();
    with_rls(limits, |rls, _| async move {
        let mut c = rls.client().await;
        let mut denied = 0;
        for i in 0..40 {
            let value = format!("u{i}");
            let one = || request("edge", vec![desc(&[("user", &value)])]);
            assert_eq!(overall(&ask(&mut c, one()).await.unwrap()), Code::Ok);
            let r = ask(&mut c, one()).await.unwrap();
            // The same keys as the policy's own hash picks, in any process.
            if policy.enforces(format!("user={value}").as_bytes()) {
                denied += 1;
                assert_eq!(overall(&r), Code::OverLimit, "{value}");
            } else {
                assert_eq!(overall(&r), Code::Ok, "{value}");
                assert_eq!(header(&r, "RateLimit-Warning"), Some(r#""user""#));
            }
        }
        assert!((4..=20).contains(&denied), "{denied} of 40 at 30%");
    })
    .await;
}

/// `canary_by: instance`: an instance in the share denies every key over
/// quota, one outside it admits every key with a warning; which instance is
/// which follows from `--instance-id` alone (the same hash in any process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_by_instance_denies_on_its_share_of_instances() {
    let limits = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 1 }
    mode: canary
    canary_percent: 50
    canary_by: instance
";
    let mut set = leasehold_client::PolicySet::from_yaml(limits).unwrap();
    let mut enforces = |id: &str| {
        set.set_instance(id);
        set.policies()[0].enforces(b"any")
    };
    let ids: Vec<String> = (0..100).map(|i| format!("rls-{i}")).collect();
    let on = ids.iter().find(|id| enforces(id)).unwrap().clone();
    let off = ids.iter().find(|id| !enforces(id)).unwrap().clone();
    let (dir_a, dir_b) = (Scratch::new("canary"), Scratch::new("canary"));
    let ledger = Ledger::start();
    let a = Rls::start(&dir_a, ledger.port, limits, &["--instance-id", &on]);
    let b = Rls::start(&dir_b, ledger.port, limits, &["--instance-id", &off]);
    let run = async {
        let (mut ca, mut cb) = (a.client().await, b.client().await);
        for i in 0..10 {
            let (va, vb) = (format!("a{i}"), format!("b{i}"));
            let on_a = || request("edge", vec![desc(&[("user", &va)])]);
            let on_b = || request("edge", vec![desc(&[("user", &vb)])]);
            assert_eq!(overall(&ask(&mut ca, on_a()).await.unwrap()), Code::Ok);
            assert_eq!(
                overall(&ask(&mut ca, on_a()).await.unwrap()),
                Code::OverLimit
            );
            assert_eq!(overall(&ask(&mut cb, on_b()).await.unwrap()), Code::Ok);
            let r = ask(&mut cb, on_b()).await.unwrap();
            assert_eq!(overall(&r), Code::Ok, "{vb} outside the share");
            assert_eq!(header(&r, "RateLimit-Warning"), Some(r#""user""#));
        }
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("within 60 s");
}

/// `replaces` (envoyproxy/ratelimit's): a request that matches a limit
/// naming another in its `replaces` is not limited by that other one: the
/// replaced descriptor is OK, with no limit, and nothing is charged to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_that_replaces_another_takes_its_place_in_the_request() {
    let yaml = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10, name: general }
  - key: plan
    value: gold
    rate_limit:
      unit: hour
      requests_per_unit: 100
      replaces:
        - name: general
";
    with_rls(yaml, |rls, _| async move {
        let mut c = rls.client().await;
        let gold = request(
            "edge",
            vec![desc(&[("user", "alice")]), desc(&[("plan", "gold")])],
        );
        for left in [99, 98, 97] {
            let r = ask(&mut c, gold.clone()).await.unwrap();
            assert_eq!(codes(&r), [(Code::Ok, 0), (Code::Ok, left)]);
            assert!(r.statuses[0].current_limit.is_none(), "{r:?}");
            let limit = r.statuses[1].current_limit.as_ref().unwrap();
            assert_eq!(
                (limit.name.as_str(), limit.requests_per_unit),
                ("plan=gold", 100)
            );
        }
        // Alone, alice's own limit applies, untouched by the three above.
        let alone = request("edge", vec![desc(&[("user", "alice")])]);
        let r = ask(&mut c, alone).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 9)]);
        let limit = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(limit.name, "general");
    })
    .await;
}

/// `envoy.type.v3.RateLimitUnit` numbers.
const SECOND: i32 = 1;
const HOUR: i32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_override_decides_from_a_bucket_of_its_own() {
    with_rls(LIMITS, |rls, ledger| async move {
        let mut c = rls.client().await;
        let over = || request("edge", vec![desc_limit(&[("user", "ann")], 3, SECOND)]);
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(overall(&ask(&mut c, over()).await.unwrap()));
        }
        assert_eq!(got, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
        let r = ask(&mut c, over()).await.unwrap();
        assert_eq!(codes(&r), [(Code::OverLimit, 0)]);
        let limit = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("override:3/second", 3, Unit::Second as i32)
        );
        // The configured limit's bucket for the same entries is untouched:
        // its first hit leaves 9 of 10.
        let r = ask(&mut c, request("edge", vec![desc(&[("user", "ann")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 9)]);
        assert_eq!(
            r.statuses[0]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            10
        );
        // The override's own ledger key, with its parameters in it.
        let key = "edge:override:3/second:user=ann";
        assert!(ledger_balance(ledger, key, 3, 3, 1000) <= 3);
        assert_eq!(
            call(ledger, &["TYPE", key]).map(|r| text(&r)),
            Some("tokenbucket".into())
        );

        // Entries that match no configured limit are limited by the
        // override all the same (envoyproxy/ratelimit's GetLimit).
        let odd = || request("edge", vec![desc_limit(&[("tenant", "t1")], 1, HOUR)]);
        assert_eq!(codes(&ask(&mut c, odd()).await.unwrap()), [(Code::Ok, 0)]);
        assert_eq!(overall(&ask(&mut c, odd()).await.unwrap()), Code::OverLimit);
        // In a domain not configured it is ignored, as there.
        let r = ask(
            &mut c,
            request("nowhere", vec![desc_limit(&[("tenant", "t1")], 1, HOUR)]),
        )
        .await
        .unwrap();
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(r.statuses[0].current_limit, None);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_override_undoes_the_other_descriptors_and_bad_overrides_are_answered() {
    with_rls(LIMITS, |rls, _| async move {
        let mut c = rls.client().await;
        let both = || {
            request(
                "edge",
                vec![
                    desc(&[("user", "bob")]),
                    desc_limit(&[("user", "bob")], 1, HOUR),
                ],
            )
        };
        let r = ask(&mut c, both()).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 9), (Code::Ok, 0)]);
        // The override is spent: denied, and bob's token, taken first, is
        // put back (he keeps 9).
        let r = ask(&mut c, both()).await.unwrap();
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(codes(&r), [(Code::Ok, 9), (Code::OverLimit, 0)]);
        assert!(header(&r, "RateLimit")
            .unwrap()
            .starts_with(r#""override:1/hour";r=0;"#));
        let r = ask(&mut c, request("edge", vec![desc(&[("user", "bob")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 8)]);

        // A limit of 0 denies every hit (as envoyproxy/ratelimit), charging
        // nothing else.
        let r = ask(
            &mut c,
            request(
                "edge",
                vec![desc(&[("user", "bob")]), desc_limit(&[("user", "bob")], 0, SECOND)],
            ),
        )
        .await
        .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 8), (Code::OverLimit, 0)]);
        assert_eq!(r.statuses[1].current_limit.as_ref().unwrap().requests_per_unit, 0);
        assert_eq!(header(&r, "Retry-After"), None);
        // An UNKNOWN unit (or a number no unit has) is refused.
        for unit in [0, 42] {
            let e = ask(
                &mut c,
                request("edge", vec![desc(&[("user", "bob")]), desc_limit(&[("user", "bob")], 5, unit)]),
            )
            .await
            .unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert_eq!(
                e.message(),
                format!("descriptor 1: limit override unit {unit} is not SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR")
            );
        }
        let r = ask(&mut c, request("edge", vec![desc(&[("user", "bob")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 7)], "a refused request charges nothing");
    })
    .await;
}

const ALGORITHMS: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
  - key: sw
    rate_limit: { unit: second, requests_per_unit: 5 }
    algorithm: sliding_window
  - key: slow
    rate_limit: { unit: hour, requests_per_unit: 5 }
    algorithm: sliding_window
  - key: g
    rate_limit: { unit: hour, requests_per_unit: 2 }
    algorithm: gcra
";

/// The stored fields of a rate-limit key (RLSTATE), by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_window_denies_the_sixth_in_its_window_and_admits_again_after() {
    with_rls(ALGORITHMS, |rls, ledger| async move {
        let mut c = rls.client().await;
        // Windows are aligned to whole seconds of the ledger's clock: a key
        // whose seven calls all land in one window is the test; on a loaded
        // machine the calls may straddle two windows, and then a new key
        // is tried (at most 10).
        let window_of = |key: &str| -> u64 {
            rlstate(ledger, &format!("{{edge}}:sw@sliding_window:sw={key}"))["window_start_ms"]
                .parse()
                .unwrap()
        };
        let mut tried = 0;
        let key = loop {
            tried += 1;
            assert!(tried <= 10, "no try kept its calls in one window");
            let key = format!("sw{tried}");
            let sw = || request("edge", vec![desc(&[("sw", &key)])]);
            let mut got = vec![codes(&ask(&mut c, sw()).await.unwrap())[0]];
            let start = window_of(&key);
            for _ in 1..6 {
                got.push(codes(&ask(&mut c, sw()).await.unwrap())[0]);
            }
            let r = ask(&mut c, sw()).await.unwrap();
            if window_of(&key) != start || got[0] != (Code::Ok, 4) {
                continue;
            }
            assert_eq!(
                got,
                [
                    (Code::Ok, 4),
                    (Code::Ok, 3),
                    (Code::Ok, 2),
                    (Code::Ok, 1),
                    (Code::Ok, 0),
                    (Code::OverLimit, 0)
                ],
                "the 6th hit in the window is denied"
            );
            assert_eq!(overall(&r), Code::OverLimit);
            let limit = r.statuses[0].current_limit.as_ref().unwrap();
            assert_eq!(
                (limit.requests_per_unit, limit.unit),
                (5, Unit::Second as i32)
            );
            assert_eq!(header(&r, "Retry-After"), Some("1"));
            break key;
        };
        let st = rlstate(ledger, &format!("{{edge}}:sw@sliding_window:sw={key}"));
        assert_eq!(st["type"], "slidingwindow");
        assert_eq!(st["window_ms"], "1000");
        let sw = || request("edge", vec![desc(&[("sw", &key)])]);
        // Admitted again once the window slides on.
        let r = eventually(&mut c, sw, Code::Ok).await;
        assert_eq!(r.statuses[0].code, Code::Ok as i32);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sliding_windows_and_gcras_are_all_or_nothing_with_the_other_descriptors() {
    with_rls(ALGORITHMS, |rls, ledger| async move {
        let mut c = rls.client().await;
        let three = || {
            request(
                "edge",
                vec![
                    desc(&[("g", "1")]),
                    desc(&[("user", "zed")]),
                    desc(&[("slow", "s")]),
                ],
            )
        };
        let r = ask(&mut c, three()).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 1), (Code::Ok, 9), (Code::Ok, 4)]);
        let r = ask(&mut c, three()).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 0), (Code::Ok, 8), (Code::Ok, 3)]);
        // The GCRA is spent: denied, the window is not charged (the script
        // charges none when one is denied), and zed's token is put back.
        let r = ask(&mut c, three()).await.unwrap();
        assert_eq!(overall(&r), Code::OverLimit);
        assert_eq!(codes(&r)[..2], [(Code::OverLimit, 0), (Code::Ok, 8)]);
        assert_eq!(
            rlstate(ledger, "{edge}:slow@sliding_window:slow=s")["current"],
            "2"
        );
        assert_eq!(rlstate(ledger, "{edge}:g@gcra:g=1")["type"], "gcra");
        let retry: u64 = header(&r, "Retry-After").unwrap().parse().unwrap();
        assert!((1..=1800).contains(&retry), "Retry-After {retry}");
        let r = ask(&mut c, request("edge", vec![desc(&[("user", "zed")])]))
            .await
            .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 7)]);
        // Negative hits give a sliding window nothing back (it cannot).
        let r = ask(
            &mut c,
            request("edge", vec![desc_hits(&[("slow", "s")], 1, true)]),
        )
        .await
        .unwrap();
        assert_eq!(overall(&r), Code::Ok);
        assert_eq!(
            rlstate(ledger, "{edge}:slow@sliding_window:slow=s")["current"],
            "2"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hits_beyond_any_capacity_are_denied_by_sliding_windows_and_gcras() {
    with_rls(ALGORITHMS, |rls, ledger| async move {
        let mut c = rls.client().await;
        // 2^63 - 512 and up round to 2^63 in Lua's doubles, which no ledger
        // command takes as an integer: such hits must still be denied, not
        // failed open as if the ledger were down.
        for hits in [u64::MAX, 1 << 63, (1 << 63) - 1, 1 << 40] {
            for (k, v) in [("g", "huge"), ("slow", "huge")] {
                let r = ask(
                    &mut c,
                    request("edge", vec![desc_hits(&[(k, v)], hits, false)]),
                )
                .await
                .unwrap();
                assert_eq!(overall(&r), Code::OverLimit, "{k} with {hits} hits");
            }
        }
        // Nothing was charged: one ordinary hit on each is admitted as the first.
        let r = ask(
            &mut c,
            request(
                "edge",
                vec![desc(&[("g", "huge")]), desc(&[("slow", "huge")])],
            ),
        )
        .await
        .unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 1), (Code::Ok, 4)]);
        assert_eq!(
            rlstate(ledger, "{edge}:slow@sliding_window:slow=huge")["current"],
            "1"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_given_back_after_a_denial_can_be_spent_again() {
    with_rls(LIMITS, |rls, ledger| async move {
        let mut c = rls.client().await;
        let pay =
            |hits, negative| request("edge", vec![desc_hits(&[("path", "/pay")], hits, negative)]);
        // The burst of 2 spent, then denied: the key is blocked locally.
        for want in [(Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)] {
            assert_eq!(codes(&ask(&mut c, pay(1, false)).await.unwrap()), [want]);
        }
        let r = ask(&mut c, pay(2, true)).await.unwrap();
        assert_eq!(codes(&r), [(Code::Ok, 2)]);
        assert_eq!(
            ledger_balance(ledger, "edge:path:path=/pay", 2, 2, 3_600_000),
            2
        );
        // The two given back are admitted at once, then the third is denied.
        for want in [(Code::Ok, 1), (Code::Ok, 0), (Code::OverLimit, 0)] {
            assert_eq!(codes(&ask(&mut c, pay(1, false)).await.unwrap()), [want]);
        }
    })
    .await;
}
