//! Pub/sub: the server-wide subscription registry, one connection's
//! subscriptions, and the messages PUBLISH sends to each thread.
//!
//! A connection stays on the thread it was dealt to, so a message goes to
//! every thread with subscribers and each thread writes it to its own
//! connections. The [`Registry`] maps each channel and each pattern to its
//! subscribers (client id -> thread and connection key); PUBLISH reads it
//! under a read lock, counts the receivers (channel subscribers, then one per
//! subscription of a matching pattern) and posts each thread one
//! [`Publish`] naming its receivers. The receiving thread checks that each
//! named connection is still the one that subscribed and still subscribed
//! ([`Subscriptions::wants`]) and appends the message, encoded in that
//! connection's RESP version, to its output between whole replies.
//!
//! Nothing here is on the path of an ordinary command: the registry is
//! locked only by the subscription commands, PUBLISH, PUBSUB and the close
//! of a subscribed connection.
//!
//! Ordering: one publisher's messages reach a subscriber in the order they
//! were published (one mailbox, first in first out); messages from
//! publishers on different threads have no common order. The count PUBLISH
//! answers is of the subscribers registered when it ran.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use hashbrown::{HashMap, HashSet};
use leasehold_protocol::{Protocol, Reply};
use parking_lot::RwLock;

use crate::config::parse::OutputLimit;
use crate::glob::glob_match;

/// Where a connection lives: its thread and its key in that thread's
/// connection table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Place {
    /// The thread (= shard) serving the connection.
    pub thread: usize,
    /// The connection's key in that thread's table.
    pub conn: usize,
}

/// A channel subscription or a pattern subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SUBSCRIBE: one channel, by name.
    Channel,
    /// PSUBSCRIBE: every channel a glob pattern matches.
    Pattern,
}

impl Kind {
    fn subscribe_word(self) -> &'static str {
        match self {
            Kind::Channel => "subscribe",
            Kind::Pattern => "psubscribe",
        }
    }

    fn unsubscribe_word(self) -> &'static str {
        match self {
            Kind::Channel => "unsubscribe",
            Kind::Pattern => "punsubscribe",
        }
    }
}

/// Subscribers of one channel or pattern, by client id.
type Subscribers = HashMap<u64, Place>;

#[derive(Debug, Default)]
struct Inner {
    channels: HashMap<Bytes, Subscribers>,
    patterns: HashMap<Bytes, Subscribers>,
}

impl Inner {
    fn map(&mut self, kind: Kind) -> &mut HashMap<Bytes, Subscribers> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
        }
    }
}

/// The server's subscriptions: channel -> subscribers, pattern ->
/// subscribers (see the module documentation). A name with no subscriber
/// left is removed, so PUBSUB CHANNELS lists only active channels.
#[derive(Debug, Default)]
pub struct Registry {
    inner: RwLock<Inner>,
}

/// One receiver of a [`Publish`] on its thread.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The connection's key in the thread's table.
    pub conn: usize,
    /// Its client id: a key reused by a newer connection is not it.
    pub client: u64,
    /// The pattern it subscribed to (a `pmessage`), or `None` for the
    /// channel itself (a `message`).
    pub pattern: Option<Bytes>,
}

/// A message for one thread's subscribers.
#[derive(Debug, Clone)]
pub struct Publish {
    /// The channel it was published to.
    pub channel: Bytes,
    /// The message.
    pub message: Bytes,
    /// Its receivers on that thread, channel subscribers first, in no
    /// particular order among them.
    pub to: Vec<Delivery>,
}

impl Publish {
    /// Appends the message as `receiver` gets it, in `proto`, to `out`:
    /// `message <channel> <message>` or `pmessage <pattern> <channel>
    /// <message>`, a push in RESP3 and an array in RESP2.
    pub fn encode(&self, receiver: &Delivery, proto: Protocol, out: &mut BytesMut) {
        let body = match &receiver.pattern {
            None => vec![
                Reply::bulk("message"),
                Reply::Bulk(self.channel.clone()),
                Reply::Bulk(self.message.clone()),
            ],
            Some(p) => vec![
                Reply::bulk("pmessage"),
                Reply::Bulk(p.clone()),
                Reply::Bulk(self.channel.clone()),
                Reply::Bulk(self.message.clone()),
            ],
        };
        Reply::Push(body).encode(proto, out);
    }
}

impl Registry {
    /// Counts the receivers of `message` on `channel` (each channel
    /// subscriber once, and once more per subscription of a matching
    /// pattern) and builds, per thread of `threads`, the message naming its
    /// receivers (`None` for a thread with none).
    pub fn publish(
        &self,
        channel: &Bytes,
        message: &Bytes,
        threads: usize,
    ) -> (usize, Vec<Option<Publish>>) {
        let mut out: Vec<Option<Publish>> = vec![None; threads];
        let mut count = 0;
        let mut add = |place: &Place, client: u64, pattern: Option<&Bytes>| {
            let Some(slot) = out.get_mut(place.thread) else {
                return;
            };
            let p = slot.get_or_insert_with(|| Publish {
                channel: channel.clone(),
                message: message.clone(),
                to: Vec::new(),
            });
            p.to.push(Delivery {
                conn: place.conn,
                client,
                pattern: pattern.cloned(),
            });
            count += 1;
        };
        let inner = self.inner.read();
        if let Some(subs) = inner.channels.get(channel) {
            for (&client, place) in subs {
                add(place, client, None);
            }
        }
        for (pattern, subs) in &inner.patterns {
            if glob_match(pattern, channel) {
                for (&client, place) in subs {
                    add(place, client, Some(pattern));
                }
            }
        }
        (count, out)
    }

    fn add(&self, kind: Kind, name: &Bytes, client: u64, place: Place) {
        let mut inner = self.inner.write();
        let map = inner.map(kind);
        map.entry(name.clone()).or_default().insert(client, place);
    }

    fn remove(&self, kind: Kind, name: &[u8], client: u64) {
        let mut inner = self.inner.write();
        let map = inner.map(kind);
        if let Some(subs) = map.get_mut(name) {
            subs.remove(&client);
            if subs.is_empty() {
                map.remove(name);
            }
        }
    }

    /// The channels with at least one subscriber that `pattern` matches
    /// (all of them without one), in no particular order (PUBSUB CHANNELS).
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let inner = self.inner.read();
        let names = inner.channels.keys();
        let matching = names.filter(|c| pattern.is_none_or(|p| glob_match(p, c)));
        matching.cloned().collect()
    }

    /// How many channels have subscribers (INFO `pubsub_channels`).
    pub fn channel_count(&self) -> usize {
        self.inner.read().channels.len()
    }

    /// How many connections subscribe to `channel` itself, patterns not
    /// counted (PUBSUB NUMSUB).
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.inner
            .read()
            .channels
            .get(channel)
            .map_or(0, |s| s.len())
    }

    /// How many distinct patterns have subscribers (PUBSUB NUMPAT).
    pub fn numpat(&self) -> usize {
        self.inner.read().patterns.len()
    }
}

/// One connection's subscriptions, where it lives, and the pub/sub output
/// it holds back while replies are owed.
#[derive(Debug, Default)]
pub struct Subscriptions {
    /// Where the connection lives (set when its thread takes it).
    pub place: Place,
    channels: HashSet<Bytes>,
    patterns: HashSet<Bytes>,
    /// Messages that came while the connection waited for replies: they
    /// follow those replies (a message never lands inside a reply, nor
    /// before a reply another shard writes to the socket itself).
    pub held: BytesMut,
    /// Since when its pending output has been above the soft limit.
    soft_since: Option<Instant>,
}

impl Subscriptions {
    /// Channels subscribed to.
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Patterns subscribed to.
    pub fn pattern_count(&self) -> usize {
        self.patterns.len()
    }

    /// Channels and patterns subscribed to (the count the confirmations
    /// show).
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    fn set(&mut self, kind: Kind) -> &mut HashSet<Bytes> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
        }
    }

    /// Subscribes client `client` to each of `names` in order; one
    /// confirmation push each, `[subscribe, name, count]` (or
    /// `psubscribe`), also for a name already subscribed.
    pub fn subscribe(
        &mut self,
        registry: &Registry,
        kind: Kind,
        names: Vec<Bytes>,
        client: u64,
    ) -> Reply {
        let place = self.place;
        let replies = names.into_iter().map(|name| {
            if self.set(kind).insert(name.clone()) {
                registry.add(kind, &name, client, place);
            }
            confirmation(kind.subscribe_word(), Reply::Bulk(name), self.count())
        });
        Reply::Several(replies.collect())
    }

    /// Unsubscribes client `client` from each of `names` in order, or from
    /// every channel (pattern) it has when `names` is empty; one
    /// confirmation push each, `[unsubscribe, name, count left]`, and
    /// `[unsubscribe, nil, count]` when `names` is empty and there was
    /// nothing to unsubscribe from.
    pub fn unsubscribe(
        &mut self,
        registry: &Registry,
        kind: Kind,
        names: Vec<Bytes>,
        client: u64,
    ) -> Reply {
        let word = kind.unsubscribe_word();
        let names = match names.is_empty() {
            true => self.set(kind).iter().cloned().collect(),
            false => names,
        };
        if names.is_empty() {
            return Reply::Several(vec![confirmation(word, Reply::Nil, self.count())]);
        }
        let replies = names.into_iter().map(|name| {
            self.set(kind).remove(&name);
            registry.remove(kind, &name, client);
            confirmation(word, Reply::Bulk(name), self.count())
        });
        Reply::Several(replies.collect())
    }

    /// Leaves every subscription without confirmations (RESET, and a
    /// connection that closes), and drops held output.
    pub fn clear(&mut self, registry: &Registry, client: u64) {
        for name in self.channels.drain() {
            registry.remove(Kind::Channel, &name, client);
        }
        for name in self.patterns.drain() {
            registry.remove(Kind::Pattern, &name, client);
        }
        self.held = BytesMut::new();
        self.soft_since = None;
    }

    /// Whether this connection still wants `d` of a message on `channel`:
    /// it still subscribes to the channel, or to the pattern.
    pub fn wants(&self, d: &Delivery, channel: &[u8]) -> bool {
        match &d.pattern {
            None => self.channels.contains(channel),
            Some(p) => self.patterns.contains(p),
        }
    }

    /// Whether `pending` bytes of unwritten output break `limit` at `now`:
    /// above the hard limit, or above the soft limit continuously for its
    /// seconds (the clock starts when the soft limit is first passed and
    /// stops when the output falls back under it).
    pub fn over_limit(&mut self, pending: usize, limit: &OutputLimit, now: Instant) -> bool {
        limit.exceeded(pending as u64, &mut self.soft_since, now)
    }
}

fn confirmation(word: &'static str, name: Reply, count: usize) -> Reply {
    Reply::Push(vec![Reply::bulk(word), name, Reply::Int(count as i64)])
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn publish_counts_channel_and_pattern_receivers_per_thread() {
        let r = Registry::default();
        let mut a = Subscriptions {
            place: Place { thread: 0, conn: 5 },
            ..Default::default()
        };
        let mut z = Subscriptions {
            place: Place { thread: 1, conn: 2 },
            ..Default::default()
        };
        a.subscribe(&r, Kind::Channel, vec![b("ch1")], 10);
        a.subscribe(&r, Kind::Pattern, vec![b("ch*")], 10);
        z.subscribe(&r, Kind::Pattern, vec![b("ch?"), b("x*")], 11);
        let (n, per_thread) = r.publish(&b("ch1"), &b("m"), 2);
        assert_eq!(n, 3);
        let t0 = per_thread[0].as_ref().unwrap();
        assert_eq!(t0.to.len(), 2);
        assert!(t0.to[0].pattern.is_none() && t0.to[0].conn == 5 && t0.to[0].client == 10);
        let t1 = per_thread[1].as_ref().unwrap();
        assert_eq!(t1.to[0].pattern.as_deref(), Some(&b"ch?"[..]));
        assert_eq!(r.publish(&b("other"), &b("m"), 2).0, 0);
        assert_eq!(r.numsub(b"ch1"), 1);
        assert_eq!(r.numpat(), 3);
        a.clear(&r, 10);
        assert_eq!(r.publish(&b("ch1"), &b("m"), 2).0, 1);
        assert_eq!(r.channels(None), Vec::<Bytes>::new());
        assert_eq!(r.numpat(), 2);
    }

    #[test]
    fn confirmations_count_channels_and_patterns() {
        let r = Registry::default();
        let mut s = Subscriptions::default();
        let reply = s.subscribe(&r, Kind::Channel, vec![b("a"), b("a"), b("b")], 1);
        let counts = |reply: Reply| match reply {
            Reply::Several(v) => v
                .into_iter()
                .map(|p| match p {
                    Reply::Push(items) => items[2].clone(),
                    other => panic!("{other:?}"),
                })
                .collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            counts(reply),
            vec![Reply::Int(1), Reply::Int(1), Reply::Int(2)]
        );
        let reply = s.subscribe(&r, Kind::Pattern, vec![b("p*")], 1);
        assert_eq!(counts(reply), vec![Reply::Int(3)]);
        let reply = s.unsubscribe(&r, Kind::Channel, Vec::new(), 1);
        let mut left = counts(reply);
        left.sort_by_key(|r| match r {
            Reply::Int(i) => *i,
            _ => 0,
        });
        assert_eq!(left, vec![Reply::Int(1), Reply::Int(2)]);
        let reply = s.unsubscribe(&r, Kind::Channel, Vec::new(), 1);
        assert_eq!(
            reply,
            Reply::Several(vec![confirmation("unsubscribe", Reply::Nil, 1)])
        );
        let reply = s.unsubscribe(&r, Kind::Channel, vec![b("never")], 1);
        assert_eq!(counts(reply), vec![Reply::Int(1)]);
    }

    #[test]
    fn limits_hard_at_once_soft_after_its_seconds() {
        let mut s = Subscriptions::default();
        let limit = OutputLimit {
            hard: 100,
            soft: 50,
            soft_seconds: 2,
        };
        let t = Instant::now();
        assert!(!s.over_limit(49, &limit, t));
        assert!(s.over_limit(100, &limit, t));
        assert!(!s.over_limit(60, &limit, t));
        assert!(!s.over_limit(60, &limit, t + Duration::from_secs(1)));
        assert!(s.over_limit(60, &limit, t + Duration::from_secs(2)));
        // Falling under the soft limit restarts its clock.
        assert!(!s.over_limit(10, &limit, t + Duration::from_secs(3)));
        assert!(!s.over_limit(60, &limit, t + Duration::from_secs(4)));
        let none = OutputLimit::default();
        assert!(!s.over_limit(usize::MAX, &none, t));
    }
}
