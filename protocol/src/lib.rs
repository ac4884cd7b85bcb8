//! The RESP codec shared by the Leasehold server and client. No sockets, no runtime.
//!
//! # Layout
//! In the order a request travels: decoded by the server, read by a
//! command handler, answered, and the answer read by the client (each
//! module is `src/<name>.rs`):
//! - [`request`]: decoding requests (RESP arrays of bulk strings and inline
//!   lines) with Redis's limits; "incomplete" is `Ok(None)`, never an error.
//! - [`inline`]: Redis's quoting rules for inline requests.
//! - [`int`]: strict integers (`string2ll`) and floats, as Redis reads them.
//! - [`args`]: the argument cursor handlers use.
//! - [`reply`]: the reply tree and its RESP2/RESP3 encoding.
//! - [`decode_reply`](mod@decode_reply): reading replies (client side)
//!   through the `redis-protocol` crate.
//! - [`slot`]: keys to Redis Cluster hash slots (CRC16 and hash tags), which
//!   the server's shards and the cluster client both route by.
//!
//! # Examples
//! ```
//! use bytes::BytesMut;
//! use leasehold_protocol::{decode_request, Limits, Protocol, Reply};
//!
//! let mut buf = BytesMut::from(&b"*1\r\n$4\r\nPING\r\n"[..]);
//! let args = decode_request(&mut buf, &Limits::default()).unwrap().unwrap();
//! assert_eq!(&args[0][..], b"PING");
//! assert_eq!(&Reply::simple("PONG").to_bytes(Protocol::Resp2)[..], b"+PONG\r\n");
//! ```

#![warn(missing_docs)]

pub mod args;
pub mod decode_reply;
pub mod inline;
pub mod int;
pub mod reply;
pub mod request;
pub mod slot;

pub use args::{ArgError, Args};
pub use decode_reply::{decode_reply, ReplyDecodeError};
pub use reply::{Aggregate, Bulks, Protocol, Reply};
pub use request::{decode_request, decode_request_raw, encode_request, Limits, ProtocolError};
