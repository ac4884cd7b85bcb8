//! Typed calls: arguments in, typed replies out.
//!
//! Reply shapes follow `docs/commands.md`: every time is in
//! milliseconds except CL.THROTTLE's whole seconds; `-1` ("never") becomes
//! `None`.

use std::time::Duration;

use bytes::Bytes;
use leasehold_protocol::Reply;

use crate::client::Client;
use crate::error::Error;

/// A token bucket's parameters; they travel with every TOKENLEASE/TOKENRETURN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketParams {
    /// Most tokens the bucket holds (tokens).
    pub capacity: u64,
    /// Tokens added per `period_ms`.
    pub rate: u64,
    /// Refill period (ms).
    pub period_ms: u64,
}

/// TOKENLEASE's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Tokens granted: 0, or between `min` and `requested`.
    pub granted: u64,
    /// Whole tokens left in the shared bucket after the grant.
    pub remaining: u64,
    /// Time until `min` tokens will be there (zero when granted); `None`
    /// when `min` exceeds the capacity and the request can never succeed.
    pub retry_after: Option<Duration>,
    /// Time until the shared bucket is full again.
    pub reset_after: Duration,
}

/// SLIDINGWINDOW's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Hits admitted: `n` or 0.
    pub admitted: u64,
    /// The window's estimate after this call, rounded up.
    pub count: u64,
    /// `floor(limit - estimate)`, at least 0.
    pub remaining: u64,
    /// Time until `n` more hits fit (zero when admitted); `None` when `n > limit`.
    pub retry_after: Option<Duration>,
}

/// CL.THROTTLE's reply (redis-cell's shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// Whether the request was limited.
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: u64,
    /// Requests left.
    pub remaining: u64,
    /// Whole seconds until a retry can succeed; `None` when allowed (or never).
    pub retry_after_s: Option<u64>,
    /// Whole seconds until the limit resets.
    pub reset_after_s: u64,
}

fn ints<const N: usize>(command: &'static str, reply: Reply) -> Result<[i64; N], Error> {
    let bad = |reply| Error::UnexpectedReply { command, reply };
    let Reply::Array(items) = &reply else {
        return Err(bad(reply));
    };
    if items.len() != N {
        return Err(bad(reply));
    }
    let mut out = [0i64; N];
    for (o, item) in out.iter_mut().zip(items) {
        match item {
            Reply::Int(i) => *o = *i,
            _ => return Err(bad(reply)),
        }
    }
    Ok(out)
}

fn int(command: &'static str, reply: Reply) -> Result<i64, Error> {
    match reply {
        Reply::Int(i) => Ok(i),
        other => Err(Error::UnexpectedReply {
            command,
            reply: other,
        }),
    }
}

fn nonneg(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn ms_or_never(v: i64) -> Option<Duration> {
    u64::try_from(v).ok().map(Duration::from_millis)
}

fn num(n: u64) -> Bytes {
    Bytes::from(n.to_string())
}

impl Client {
    /// `TOKENLEASE key capacity rate period_ms requested [MIN min]` under the
    /// lease deadline (`MIN` is sent only when `min != requested`; pass
    /// `requested = min = 0` to peek).
    ///
    /// # Errors
    /// Transport errors, [`Error::Server`] (bad arguments, WRONGTYPE), and
    /// [`Error::UnexpectedReply`] for a reply that is not four integers.
    pub async fn token_lease(
        &self,
        key: &[u8],
        p: BucketParams,
        requested: u64,
        min: u64,
    ) -> Result<Lease, Error> {
        let mut args = vec![
            Bytes::from_static(b"TOKENLEASE"),
            Bytes::copy_from_slice(key),
            num(p.capacity),
            num(p.rate),
            num(p.period_ms),
            num(requested),
        ];
        // All or nothing is the server's default; `requested` 0 is a peek.
        if min != requested {
            args.extend([Bytes::from_static(b"MIN"), num(min)]);
        }
        let reply = self.call(&args, self.config().lease_deadline).await?;
        let [granted, remaining, retry, reset] = ints::<4>("TOKENLEASE", reply)?;
        Ok(Lease {
            granted: nonneg(granted),
            remaining: nonneg(remaining),
            retry_after: ms_or_never(retry),
            reset_after: Duration::from_millis(nonneg(reset)),
        })
    }

    /// `TOKENRETURN key capacity rate period_ms count` under the lease
    /// deadline; returns the bucket's whole tokens afterwards.
    ///
    /// # Errors
    /// As [`Client::token_lease`].
    pub async fn token_return(
        &self,
        key: &[u8],
        p: BucketParams,
        count: u64,
    ) -> Result<u64, Error> {
        let args = [
            Bytes::from_static(b"TOKENRETURN"),
            Bytes::copy_from_slice(key),
            num(p.capacity),
            num(p.rate),
            num(p.period_ms),
            num(count),
        ];
        let reply = self.call(&args, self.config().lease_deadline).await?;
        Ok(nonneg(int("TOKENRETURN", reply)?))
    }

    /// `SLIDINGWINDOW key limit window_ms COUNT n`.
    ///
    /// # Errors
    /// As [`Client::token_lease`].
    pub async fn sliding_window(
        &self,
        key: &[u8],
        limit: u64,
        window_ms: u64,
        n: u64,
    ) -> Result<Window, Error> {
        let args = [
            Bytes::from_static(b"SLIDINGWINDOW"),
            Bytes::copy_from_slice(key),
            num(limit),
            num(window_ms),
            Bytes::from_static(b"COUNT"),
            num(n),
        ];
        let reply = self.call(&args, self.config().call_deadline).await?;
        let [admitted, count, remaining, retry] = ints::<4>("SLIDINGWINDOW", reply)?;
        Ok(Window {
            admitted: nonneg(admitted),
            count: nonneg(count),
            remaining: nonneg(remaining),
            retry_after: ms_or_never(retry),
        })
    }

    /// `CL.THROTTLE key max_burst count_per_period period_s quantity`.
    ///
    /// # Errors
    /// As [`Client::token_lease`].
    pub async fn cl_throttle(
        &self,
        key: &[u8],
        max_burst: u64,
        count_per_period: u64,
        period_s: u64,
        quantity: u64,
    ) -> Result<Throttle, Error> {
        let args = [
            Bytes::from_static(b"CL.THROTTLE"),
            Bytes::copy_from_slice(key),
            num(max_burst),
            num(count_per_period),
            num(period_s),
            num(quantity),
        ];
        let reply = self.call(&args, self.config().call_deadline).await?;
        let [limited, limit, remaining, retry, reset] = ints::<5>("CL.THROTTLE", reply)?;
        Ok(Throttle {
            limited: limited != 0,
            limit: nonneg(limit),
            remaining: nonneg(remaining),
            retry_after_s: u64::try_from(retry).ok(),
            reset_after_s: nonneg(reset),
        })
    }

    /// `GET key`: `None` for a missing key.
    ///
    /// # Errors
    /// Transport errors, WRONGTYPE, or a reply that is not a bulk string.
    pub async fn get(&self, key: &[u8]) -> Result<Option<Bytes>, Error> {
        match self
            .call(&[b"GET", key], self.config().call_deadline)
            .await?
        {
            Reply::Bulk(b) => Ok(Some(b)),
            Reply::Nil => Ok(None),
            other => Err(Error::UnexpectedReply {
                command: "GET",
                reply: other,
            }),
        }
    }

    /// `SET key value`.
    ///
    /// # Errors
    /// Transport errors and server errors.
    pub async fn set(&self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.call(&[&b"SET"[..], key, value], self.config().call_deadline)
            .await
            .map(drop)
    }

    /// `INCR key`: the new value.
    ///
    /// # Errors
    /// Transport errors; [`Error::Server`] when the value is not an integer.
    pub async fn incr(&self, key: &[u8]) -> Result<i64, Error> {
        int(
            "INCR",
            self.call(&[b"INCR", key], self.config().call_deadline)
                .await?,
        )
    }

    /// `DEL key`: how many keys were removed (0 or 1).
    ///
    /// # Errors
    /// Transport errors.
    pub async fn del(&self, key: &[u8]) -> Result<u64, Error> {
        Ok(nonneg(int(
            "DEL",
            self.call(&[b"DEL", key], self.config().call_deadline)
                .await?,
        )?))
    }

    /// `PING`.
    ///
    /// # Errors
    /// Transport errors, or a reply other than `PONG`.
    pub async fn ping(&self) -> Result<(), Error> {
        match self.call(&[b"PING"], self.config().call_deadline).await? {
            Reply::Simple(s) if s == "PONG" => Ok(()),
            other => Err(Error::UnexpectedReply {
                command: "PING",
                reply: other,
            }),
        }
    }
}
