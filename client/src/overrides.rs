//! Emergency overrides: an operator disables or widens one limit on every
//! lease manager and every `leasehold-rls` leasing from one ledger at once,
//! without a deploy, by publishing on the ledger's pub/sub channel
//! ([`DEFAULT_CHANNEL`], `leasehold-rls:override`):
//!
//! ```text
//! PUBLISH leasehold-rls:override "edge user disable 60000"    # unlimited for 60 s
//! PUBLISH leasehold-rls:override "edge user widen 10 300000"  # 10x for 5 min
//! PUBLISH leasehold-rls:override "edge user clear"            # back now
//! ```
//!
//! A message is `<domain> <policy name> <action> [<factor>] <ttl ms>`
//! ([`parse`]). An override expires by itself after its ttl unless
//! published again (which renews it).
//!
//! This module is the one implementation both users share: the message
//! ([`parse`]), the table of overrides in force ([`Overrides`]), the
//! widened policy ([`Overrides::widened`]) and the subscription that
//! follows the channel on one node, the primary Sentinel names, or every
//! primary of a cluster ([`subscribe`]). A [`LeaseManager`] applies them to
//! its own policies once told to follow the channel
//! ([`LeaseManager::follow_overrides`]); `leasehold-rls` rebuilds its
//! limits from them.
//!
//! A widened policy decides from a fresh ledger bucket named
//! `<policy>@x<factor>` (so its headers and metrics say so), full at the
//! widened burst: relief starts at once rather than after the emptied
//! bucket refills at the new rate. When the override ends, the policy goes
//! back to its own bucket, which the ledger kept (and refilled) meanwhile.
//!
//! [`LeaseManager`]: crate::LeaseManager
//! [`LeaseManager::follow_overrides`]: crate::LeaseManager::follow_overrides

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use leasehold_protocol::{decode_reply, encode_request, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::Client;
use crate::policy::Policy;

/// The channel overrides are published on unless configured otherwise
/// (`leasehold-rls --override-channel`).
pub const DEFAULT_CHANNEL: &str = "leasehold-rls:override";

/// What an override does to its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// The policy admits everything (its descriptors answer as unlimited).
    Disable,
    /// Rate, burst and fail-open rate multiplied by this factor (2 to 1000).
    Widen(u64),
}

/// An override in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Override {
    /// What it does.
    pub action: Action,
    /// When it ends by itself.
    pub until: Instant,
}

/// A parsed override message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Message {
    /// Sets (or renews) the override of `domain`'s `policy` for `ttl`.
    Set {
        /// The domain.
        domain: String,
        /// The policy's name.
        policy: String,
        /// What to do.
        action: Action,
        /// How long it lasts unless renewed (1 ms to 24 h).
        ttl: Duration,
    },
    /// Ends the override of `domain`'s `policy` now.
    Clear {
        /// The domain.
        domain: String,
        /// The policy's name.
        policy: String,
    },
}

impl Message {
    /// The domain and policy name the message is about.
    pub fn target(&self) -> (&str, &str) {
        let (Message::Set { domain, policy, .. } | Message::Clear { domain, policy }) = self;
        (domain, policy)
    }
}

/// The longest an override lasts without being renewed.
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// The largest widening factor.
pub const MAX_FACTOR: u64 = 1000;

/// Parses one message.
///
/// # Errors
/// A message saying what is wrong: the wrong number of words, an unknown
/// action, a factor outside 2..=1000, a ttl outside 1 ms..=24 h.
pub fn parse(text: &str) -> Result<Message, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let ttl = |w: &str| -> Result<Duration, String> {
        let ms: u64 = w
            .parse()
            .map_err(|_| format!("ttl {w:?} is not whole ms"))?;
        let d = Duration::from_millis(ms);
        if ms == 0 || d > MAX_TTL {
            return Err(format!("ttl {ms} ms is outside 1 ms..=24 h"));
        }
        Ok(d)
    };
    let (domain, policy) = match words.as_slice() {
        [d, p, ..] => ((*d).to_owned(), (*p).to_owned()),
        _ => return Err("expected `<domain> <policy> <action> ...`".into()),
    };
    match words[2..] {
        ["disable", t] => Ok(Message::Set {
            domain,
            policy,
            action: Action::Disable,
            ttl: ttl(t)?,
        }),
        ["widen", f, t] => {
            let factor: u64 = f
                .parse()
                .ok()
                .filter(|f| (2..=MAX_FACTOR).contains(f))
                .ok_or_else(|| format!("factor {f:?} is not a whole number in 2..=1000"))?;
            Ok(Message::Set {
                domain,
                policy,
                action: Action::Widen(factor),
                ttl: ttl(t)?,
            })
        }
        ["clear"] => Ok(Message::Clear { domain, policy }),
        _ => Err(format!(
            "expected `disable <ttl ms>`, `widen <factor> <ttl ms>` or `clear` after the policy, got {:?}",
            words[2..].join(" ")
        )),
    }
}

/// The overrides in force, by (domain, policy name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    by_policy: HashMap<(String, String), Override>,
}

impl Overrides {
    /// Applies `m` at `now`; returns whether the overrides changed.
    pub fn apply(&mut self, m: Message, now: Instant) -> bool {
        match m {
            Message::Set {
                domain,
                policy,
                action,
                ttl,
            } => {
                let o = Override {
                    action,
                    until: now + ttl,
                };
                self.by_policy.insert((domain, policy), o) != Some(o)
            }
            Message::Clear { domain, policy } => self.by_policy.remove(&(domain, policy)).is_some(),
        }
    }

    /// Removes the overrides that ended by `now`; returns their keys.
    pub fn expire(&mut self, now: Instant) -> Vec<(String, String)> {
        let ended: Vec<(String, String)> = self
            .by_policy
            .iter()
            .filter(|(_, o)| o.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &ended {
            self.by_policy.remove(k);
        }
        ended
    }

    /// The override of `domain`'s `policy`, if any.
    pub fn get(&self, domain: &str, policy: &str) -> Option<Override> {
        self.by_policy
            .get(&(domain.to_owned(), policy.to_owned()))
            .copied()
    }

    /// When the next override ends.
    pub fn next_end(&self) -> Option<Instant> {
        self.by_policy.values().map(|o| o.until).min()
    }

    /// `p` as a widening by `factor` makes it: rates and burst multiplied
    /// (saturating), named `<name>@x<factor>`.
    pub fn widened(p: &Policy, factor: u64) -> Policy {
        Policy {
            name: format!("{}@x{factor}", p.name),
            requests_per_unit: p.requests_per_unit.saturating_mul(factor),
            burst: p.burst.saturating_mul(factor),
            fail_open_requests_per_unit: p.fail_open_requests_per_unit.saturating_mul(factor),
            ..p.clone()
        }
    }
}

/// Follows the override channel on the ledger `client` calls (its address,
/// or the primary Sentinel names): subscribes, calls `on_message` with each
/// message's text, and reconnects (after 200 ms, to the primary of the
/// moment) when the connection fails. Runs until its task is dropped.
pub async fn subscribe(client: Client, channel: String, mut on_message: impl FnMut(&str)) {
    if client.slot_map().is_some() {
        return subscribe_cluster(client, channel, on_message).await;
    }
    loop {
        let Some(addr) = client.primary() else {
            // Sentinel addressing before any connect: find the primary.
            if let Err(e) = client.connect().await {
                tracing::warn!("override channel: no ledger primary yet: {e}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        match follow(addr, &channel, &mut on_message).await {
            Ok(()) => tracing::warn!(%addr, "override channel closed by the ledger; reconnecting"),
            Err(e) => tracing::warn!(%addr, "override channel: {e}; reconnecting"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The tasks following the channel on each primary, stopped when dropped.
#[derive(Default)]
struct Followers(HashMap<SocketAddr, tokio::task::JoinHandle<()>>);

impl Drop for Followers {
    fn drop(&mut self) {
        for task in self.0.values() {
            task.abort();
        }
    }
}

/// How often a cluster's slot map is read again for the primaries to
/// follow the override channel on.
const CLUSTER_NODES_EVERY: Duration = Duration::from_secs(1);

/// [`subscribe`] over a ledger cluster: Leasehold nodes do not forward
/// PUBLISH to each other, so the channel is followed on every primary of
/// the slot map (read again every [`CLUSTER_NODES_EVERY`]), and an override
/// published on any of them is heard. A primary that leaves the map is
/// dropped; one that joins is followed.
async fn subscribe_cluster(client: Client, channel: String, mut on_message: impl FnMut(&str)) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut followed = Followers::default();
    let mut tick = tokio::time::interval(CLUSTER_NODES_EVERY);
    loop {
        tokio::select! {
            Some(text) = rx.recv() => on_message(&text),
            _ = tick.tick() => {
                if let Err(e) = client.reload_slot_map().await {
                    tracing::warn!("override channel: cluster slot map not read: {e}");
                }
                let nodes = client.slot_map().map_or_else(Vec::new, |m| m.nodes().to_vec());
                followed.0.retain(|addr, task| {
                    let keep = nodes.contains(addr);
                    if !keep {
                        task.abort();
                    }
                    keep
                });
                for addr in nodes {
                    followed.0.entry(addr).or_insert_with(|| {
                        let (tx, channel) = (tx.clone(), channel.clone());
                        tokio::spawn(async move {
                            loop {
                                let mut send = |m: &str| drop(tx.send(m.to_owned()));
                                match follow(addr, &channel, &mut send).await {
                                    Ok(()) => tracing::warn!(%addr, "override channel closed; reconnecting"),
                                    Err(e) => tracing::warn!(%addr, "override channel: {e}; reconnecting"),
                                }
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                        })
                    });
                }
            }
        }
    }
}

async fn follow(
    addr: std::net::SocketAddr,
    channel: &str,
    on_message: &mut impl FnMut(&str),
) -> std::io::Result<()> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut out = BytesMut::new();
    encode_request(&["SUBSCRIBE", channel], &mut out);
    s.write_all(&out).await?;
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        loop {
            let reply = decode_reply(&mut buf)
                .map_err(|e| std::io::Error::other(format!("bad reply: {e:?}")))?;
            let Some(reply) = reply else { break };
            let parts = match reply {
                Reply::Array(a) | Reply::Push(a) => a,
                other => return Err(std::io::Error::other(format!("unexpected reply {other:?}"))),
            };
            match parts.as_slice() {
                [Reply::Bulk(kind), _, Reply::Bulk(payload)] if &kind[..] == b"message" => {
                    on_message(&String::from_utf8_lossy(payload));
                }
                [Reply::Bulk(kind), ..] if &kind[..] == b"subscribe" => {
                    tracing::info!(%addr, channel, "following the override channel");
                }
                _ => {}
            }
        }
        if s.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse_and_bad_ones_say_why() {
        assert_eq!(
            parse("edge user disable 60000"),
            Ok(Message::Set {
                domain: "edge".into(),
                policy: "user".into(),
                action: Action::Disable,
                ttl: Duration::from_secs(60)
            })
        );
        assert_eq!(
            parse(" edge  path=/pay  widen 10 500 "),
            Ok(Message::Set {
                domain: "edge".into(),
                policy: "path=/pay".into(),
                action: Action::Widen(10),
                ttl: Duration::from_millis(500)
            })
        );
        assert_eq!(
            parse("edge user clear"),
            Ok(Message::Clear {
                domain: "edge".into(),
                policy: "user".into()
            })
        );
        assert!(parse("edge user widen 1 500")
            .unwrap_err()
            .contains("factor"));
        assert!(parse("edge user disable 0").unwrap_err().contains("ttl"));
        assert!(parse("edge user disable 86400001")
            .unwrap_err()
            .contains("24 h"));
        assert!(parse("edge user pause 5").unwrap_err().contains("expected"));
        assert!(parse("edge").is_err());
    }

    #[test]
    fn overrides_renew_clear_and_expire() {
        let t0 = Instant::now();
        let mut o = Overrides::default();
        assert!(o.apply(parse("d p disable 100").unwrap(), t0));
        assert_eq!(o.next_end(), Some(t0 + Duration::from_millis(100)));
        // Renewed later: ends later.
        let t1 = t0 + Duration::from_millis(50);
        assert!(o.apply(parse("d p disable 100").unwrap(), t1));
        assert!(o.expire(t0 + Duration::from_millis(120)).is_empty());
        assert_eq!(
            o.expire(t1 + Duration::from_millis(100)),
            [("d".into(), "p".into())]
        );
        assert_eq!(o.get("d", "p"), None);
        assert!(o.apply(parse("d p widen 3 100").unwrap(), t0));
        assert!(o.apply(parse("d p clear").unwrap(), t0));
        assert!(!o.apply(parse("d p clear").unwrap(), t0));
    }
}
