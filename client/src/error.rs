//! Typed client errors: callers ask the error what it is and what to do.
//!
//! Nothing outside this module looks at error text. A server error reply is
//! parsed once, here, into a [`ServerErrorKind`]; the lease manager and the
//! breaker only call [`Error::is_timeout`], [`Error::is_connection`],
//! [`Error::counts_against_ledger`] and [`Error::retry_action`].

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use leasehold_protocol::{Reply, ReplyDecodeError};

/// Why a call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// No reply within the call's deadline. The connection that carried the
    /// request has been discarded (its reply may still arrive, to no one).
    Timeout {
        /// The deadline that passed.
        deadline: Duration,
    },
    /// Connecting, writing or reading failed, or the connection closed while
    /// the call waited for its reply.
    Connection(ConnectionError),
    /// The server sent bytes that are not RESP.
    Protocol(ReplyDecodeError),
    /// The server answered with an error reply.
    Server(ServerError),
    /// The reply had a shape the typed call does not expect.
    UnexpectedReply {
        /// The command whose reply it was.
        command: &'static str,
        /// The reply as received.
        reply: Reply,
    },
    /// Cluster mode: the call was redirected (`MOVED`/`ASK`) `redirects`
    /// times, the bound ([`ClusterConfig::max_redirects`](crate::ClusterConfig::max_redirects)),
    /// and the last node redirected it again: the nodes disagree about
    /// who owns `slot` (a topology being changed, or a broken one).
    TooManyRedirects {
        /// The hash slot.
        slot: u16,
        /// `host:port` of the last redirection, not followed.
        addr: String,
        /// Redirections followed.
        redirects: u32,
    },
    /// The circuit breaker is open (or a probe is already in flight); the call
    /// did not reach the server.
    CircuitOpen {
        /// Time until the breaker lets a probe through (zero while a probe runs).
        retry_in: Duration,
    },
}

/// A connection-level failure.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectionError {
    /// Connecting, writing or reading failed.
    Io(io::Error),
    /// The connection closed (or was discarded) before the reply came.
    Closed,
    /// The last connect attempt failed and the backoff has not elapsed yet.
    Backoff {
        /// Time until the next attempt is allowed.
        retry_in: Duration,
    },
    /// Sentinel addressing: no sentinel named a primary for the master name
    /// (each was unreachable, missed the query timeout, or does not know
    /// the name).
    NoSentinel,
    /// Sentinel addressing: the node the sentinels named is not a primary
    /// (its `ROLE` says otherwise), still so after asking them again: a
    /// stale answer while a failover is under way.
    NotPrimary {
        /// The node that was named.
        addr: SocketAddr,
    },
    /// Cluster mode: no node to ask for the slot map (no seeds), or none
    /// to send a command to.
    NoClusterNode,
}

/// An error reply, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// What kind of error the first word names.
    pub kind: ServerErrorKind,
    /// The full error text as the server sent it (for logs only).
    pub message: String,
}

/// The error code of a server error reply (its first word).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ServerErrorKind {
    /// `ERR`: a generic error (bad arguments, unknown command, ...).
    Err,
    /// `WRONGTYPE`: the key holds another kind of value.
    WrongType,
    /// `NOAUTH`: authentication required.
    NoAuth,
    /// `MOVED slot host:port`: the slot lives on another node.
    Moved {
        /// The hash slot.
        slot: u16,
        /// The node that owns it.
        addr: String,
    },
    /// `ASK slot host:port`: ask that node once, after `ASKING`.
    Ask {
        /// The hash slot.
        slot: u16,
        /// The node to ask.
        addr: String,
    },
    /// `TRYAGAIN`: a multi-key operation during resharding; retry shortly.
    TryAgain,
    /// `READONLY`: the node is a replica.
    ReadOnly,
    /// `LOADING`: the server is loading its dataset.
    Loading,
    /// `BUSY`: the server is busy running a script.
    Busy,
    /// Any other code (kept verbatim).
    Other(String),
}

/// What a caller should do after an error, in the manner of redis-rs's
/// `retry_method()`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryAction {
    /// Do not retry: the request itself is wrong, or the answer is final.
    NoRetry,
    /// Retry on the same connection after a short wait.
    RetryLater,
    /// The connection is gone: retry on a new one.
    Reconnect,
    /// Retry on the node at `addr` (`MOVED`).
    Redirect {
        /// `host:port` of the node.
        addr: String,
    },
    /// Send `ASKING` then retry once on the node at `addr` (`ASK`).
    Ask {
        /// `host:port` of the node.
        addr: String,
    },
    /// Wait until the breaker lets calls through.
    WaitForBreaker,
}

impl ServerError {
    /// Parses an error reply's text (`"MOVED 3999 127.0.0.1:6381"`).
    pub fn parse(message: &str) -> ServerError {
        let mut words = message.split_ascii_whitespace();
        let code = words.next().unwrap_or("");
        let redirect = |mut words: std::str::SplitAsciiWhitespace<'_>| {
            let slot = words.next().and_then(|s| s.parse::<u16>().ok());
            let addr = words.next().map(str::to_owned);
            slot.zip(addr)
        };
        let kind = match code {
            "ERR" => ServerErrorKind::Err,
            "WRONGTYPE" => ServerErrorKind::WrongType,
            "NOAUTH" => ServerErrorKind::NoAuth,
            "TRYAGAIN" => ServerErrorKind::TryAgain,
            "READONLY" => ServerErrorKind::ReadOnly,
            "LOADING" => ServerErrorKind::Loading,
            "BUSY" => ServerErrorKind::Busy,
            "MOVED" | "ASK" => match redirect(words) {
                Some((slot, addr)) if code == "MOVED" => ServerErrorKind::Moved { slot, addr },
                Some((slot, addr)) => ServerErrorKind::Ask { slot, addr },
                None => ServerErrorKind::Other(code.to_owned()),
            },
            other => ServerErrorKind::Other(other.to_owned()),
        };
        ServerError {
            kind,
            message: message.to_owned(),
        }
    }
}

/// Whether `reply` is a `READONLY` error (the node is a replica, e.g. a
/// primary demoted by a failover).
pub(crate) fn is_readonly(reply: &Reply) -> bool {
    matches!(reply, Reply::Error(text) if text.split_ascii_whitespace().next() == Some("READONLY"))
}

impl ServerErrorKind {
    /// Whether the server said "not now" (LOADING, BUSY, TRYAGAIN) rather
    /// than "no".
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ServerErrorKind::Loading | ServerErrorKind::Busy | ServerErrorKind::TryAgain
        )
    }
}

impl Error {
    /// Whether the call missed its deadline.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// Whether the connection failed (connect, I/O, closed, in backoff).
    pub fn is_connection(&self) -> bool {
        matches!(self, Error::Connection(_))
    }

    /// Whether the breaker refused the call without sending it.
    pub fn is_circuit_open(&self) -> bool {
        matches!(self, Error::CircuitOpen { .. })
    }

    /// The server error kind, if the server answered with an error.
    pub fn server_kind(&self) -> Option<&ServerErrorKind> {
        match self {
            Error::Server(e) => Some(&e.kind),
            _ => None,
        }
    }

    /// Whether this error says the ledger is unhealthy (counts toward opening
    /// the breaker). An `ERR` or `WRONGTYPE` reply proves the server is alive
    /// and answering, so it does not count; timeouts, broken connections,
    /// garbage bytes and "not now" replies (LOADING, BUSY, TRYAGAIN) do, and
    /// so does a cluster whose nodes redirect a call in circles.
    pub fn counts_against_ledger(&self) -> bool {
        match self {
            Error::Timeout { .. }
            | Error::Connection(_)
            | Error::Protocol(_)
            | Error::TooManyRedirects { .. } => true,
            Error::Server(e) => e.kind.is_unavailable(),
            _ => false,
        }
    }

    /// What the caller should do next.
    pub fn retry_action(&self) -> RetryAction {
        match self {
            Error::Timeout { .. } | Error::Connection(_) | Error::Protocol(_) => {
                RetryAction::Reconnect
            }
            Error::CircuitOpen { .. } => RetryAction::WaitForBreaker,
            Error::TooManyRedirects { .. } => RetryAction::RetryLater,
            Error::Server(e) => match &e.kind {
                ServerErrorKind::Moved { addr, .. } => RetryAction::Redirect { addr: addr.clone() },
                ServerErrorKind::Ask { addr, .. } => RetryAction::Ask { addr: addr.clone() },
                ServerErrorKind::TryAgain | ServerErrorKind::Loading | ServerErrorKind::Busy => {
                    RetryAction::RetryLater
                }
                ServerErrorKind::ReadOnly => RetryAction::Reconnect,
                _ => RetryAction::NoRetry,
            },
            _ => RetryAction::NoRetry,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Timeout { deadline } => write!(f, "no reply within {deadline:?}"),
            Error::Connection(ConnectionError::Io(e)) => write!(f, "connection failed: {e}"),
            Error::Connection(ConnectionError::Closed) => f.write_str("connection closed"),
            Error::Connection(ConnectionError::Backoff { retry_in }) => {
                write!(f, "reconnecting, next attempt in {retry_in:?}")
            }
            Error::Connection(ConnectionError::NoSentinel) => {
                f.write_str("no sentinel named a primary")
            }
            Error::Connection(ConnectionError::NotPrimary { addr }) => {
                write!(f, "{addr} is not a primary")
            }
            Error::Connection(ConnectionError::NoClusterNode) => {
                f.write_str("no cluster node to ask")
            }
            Error::Protocol(e) => write!(f, "{e}"),
            Error::TooManyRedirects {
                slot,
                addr,
                redirects,
            } => write!(
                f,
                "slot {slot} still redirected (to {addr}) after {redirects} redirections"
            ),
            Error::Server(e) => write!(f, "server error: {}", e.message),
            Error::UnexpectedReply { command, reply } => {
                write!(f, "unexpected reply to {command}: {reply:?}")
            }
            Error::CircuitOpen { retry_in } => write!(f, "circuit open for {retry_in:?}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Connection(ConnectionError::Io(e)) => Some(e),
            Error::Protocol(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        Error::Connection(ConnectionError::Io(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redirects_and_codes() {
        let moved = ServerError::parse("MOVED 3999 127.0.0.1:6381");
        assert_eq!(
            moved.kind,
            ServerErrorKind::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381".into()
            }
        );
        let ask = Error::Server(ServerError::parse("ASK 12 10.0.0.1:7000"));
        assert_eq!(
            ask.retry_action(),
            RetryAction::Ask {
                addr: "10.0.0.1:7000".into()
            }
        );
        let wrong = Error::Server(ServerError::parse("WRONGTYPE Operation against a key"));
        assert_eq!(wrong.server_kind(), Some(&ServerErrorKind::WrongType));
        assert_eq!(wrong.retry_action(), RetryAction::NoRetry);
        assert!(!wrong.counts_against_ledger());
        let again = Error::Server(ServerError::parse("TRYAGAIN Multiple keys request"));
        assert_eq!(again.retry_action(), RetryAction::RetryLater);
        assert!(again.counts_against_ledger());
        assert_eq!(
            ServerError::parse("MOVED garbage").kind,
            ServerErrorKind::Other("MOVED".into())
        );
        assert_eq!(
            ServerError::parse("NOAUTH Authentication required.").kind,
            ServerErrorKind::NoAuth
        );
        assert_eq!(
            ServerError::parse("READONLY You can't write").kind,
            ServerErrorKind::ReadOnly
        );
        assert!(is_readonly(&Reply::err("READONLY You can't write")));
        assert!(!is_readonly(&Reply::err("READONLYX")));
        assert!(!is_readonly(&Reply::bulk("READONLY")));
    }

    #[test]
    fn timeouts_and_connection_errors_say_what_they_are() {
        let t = Error::Timeout {
            deadline: Duration::from_millis(5),
        };
        assert!(t.is_timeout() && !t.is_connection() && t.counts_against_ledger());
        assert_eq!(t.retry_action(), RetryAction::Reconnect);
        let c = Error::Connection(ConnectionError::Closed);
        assert!(c.is_connection() && !c.is_timeout());
    }
}
