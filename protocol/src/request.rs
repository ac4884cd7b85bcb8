//! Request decoding: RESP multibulk arrays and inline commands.
//!
//! A request is a flat array of bulk strings (`*N\r\n$len\r\n...`) or, when the
//! first byte is not `*`, one inline line split with Redis's quoting rules (what
//! `telnet` and `redis-cli` in inline mode send). Decoding never consumes a
//! partial request: [`decode_request`] answers `Ok(None)` ("read more") distinctly
//! from `Err` ("invalid, reply and close"). Arguments are `Bytes` slices of the read
//! buffer, so decoding copies nothing.
//!
//! The limits and error texts follow Redis 7 (`networking.c`,
//! `processMultibulkBuffer` and `processInlineBuffer`).

use bytes::{Bytes, BytesMut};

use crate::inline::split_args;

/// Redis's default `proto-max-bulk-len`: 512 MB.
pub const DEFAULT_MAX_BULK_LEN: usize = 512 * 1024 * 1024;
/// Largest multibulk element count accepted: 1,048,576 elements.
pub const DEFAULT_MAX_MULTIBULK_LEN: usize = 1024 * 1024;
/// Redis's `PROTO_INLINE_MAX_SIZE`: an inline line, or a `*`/`$` header line,
/// may be at most 64 KB.
pub const DEFAULT_MAX_INLINE_LEN: usize = 64 * 1024;
/// Before AUTH, Redis accepts at most 10 arguments per request...
pub const UNAUTH_MAX_MULTIBULK_LEN: usize = 10;
/// ...and bulk strings of at most 16 KB.
pub const UNAUTH_MAX_BULK_LEN: usize = 16 * 1024;

/// Limits applied while decoding one connection's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string, in bytes.
    pub max_bulk_len: usize,
    /// Largest number of elements in one request array.
    pub max_multibulk_len: usize,
    /// Longest inline request or header line, in bytes.
    pub max_inline_len: usize,
    /// Whether the connection has authenticated; when false the tighter
    /// pre-auth limits ([`UNAUTH_MAX_MULTIBULK_LEN`], [`UNAUTH_MAX_BULK_LEN`]) apply.
    pub authenticated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: DEFAULT_MAX_BULK_LEN,
            max_multibulk_len: DEFAULT_MAX_MULTIBULK_LEN,
            max_inline_len: DEFAULT_MAX_INLINE_LEN,
            authenticated: true,
        }
    }
}

/// Why a request could not be decoded. The connection gets
/// `-ERR Protocol error: <Display>` and is then closed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A `*` header that is not a number, or above the multibulk limit.
    InvalidMultibulkLength,
    /// A `$` header that is not a number, negative, or above the bulk limit.
    InvalidBulkLength,
    /// An array element that is not a bulk string.
    ExpectedBulk {
        /// The byte found where `$` was expected.
        got: u8,
    },
    /// A `*` header line longer than the inline limit.
    TooBigMultibulkCount,
    /// A `$` header line longer than the inline limit.
    TooBigBulkCount,
    /// An inline request longer than the inline limit.
    TooBigInline,
    /// An inline request with an unterminated quote.
    UnbalancedQuotes,
    /// More than [`UNAUTH_MAX_MULTIBULK_LEN`] elements before AUTH.
    UnauthenticatedMultibulkLength,
    /// A bulk string above [`UNAUTH_MAX_BULK_LEN`] before AUTH.
    UnauthenticatedBulkLength,
}

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtocolError::InvalidMultibulkLength => f.write_str("invalid multibulk length"),
            ProtocolError::InvalidBulkLength => f.write_str("invalid bulk length"),
            ProtocolError::ExpectedBulk { got } => {
                write!(f, "expected '$', got '{}'", char::from(*got))
            }
            ProtocolError::TooBigMultibulkCount => f.write_str("too big mbulk count string"),
            ProtocolError::TooBigBulkCount => f.write_str("too big bulk count string"),
            ProtocolError::TooBigInline => f.write_str("too big inline request"),
            ProtocolError::UnbalancedQuotes => f.write_str("unbalanced quotes in request"),
            ProtocolError::UnauthenticatedMultibulkLength => {
                f.write_str("unauthenticated multibulk length")
            }
            ProtocolError::UnauthenticatedBulkLength => f.write_str("unauthenticated bulk length"),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// Decodes one request from the front of `buf`.
///
/// - `Ok(Some(args))`: a complete request was removed from `buf`. `args` may be
///   empty (`*0`, `*-1`, a blank inline line): callers skip those, as Redis does.
/// - `Ok(None)`: `buf` holds only part of a request; nothing was consumed.
/// - `Err(e)`: the bytes can never form a valid request.
///
/// # Errors
/// See [`ProtocolError`]. No allocation is made from a length header: a bulk of
/// 512 MB is only buffered as its bytes arrive.
pub fn decode_request(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    Ok(decode_request_raw(buf, limits)?.map(|(_, args)| args))
}

/// [`decode_request`], also giving the bytes the request was read from
/// (its whole frame, as it was in `buf`), for a reader that checksums what
/// it consumes. The arguments share the frame's memory: no copy is made.
///
/// # Errors
/// As [`decode_request`].
pub fn decode_request_raw(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<(Bytes, Vec<Bytes>)>, ProtocolError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] == b'*' {
        decode_multibulk(buf, limits)
    } else {
        decode_inline(buf, limits)
    }
}

/// Finds the `\r` ending the header line that starts at `from`.
fn find_cr(buf: &[u8], from: usize) -> Option<usize> {
    buf[from..]
        .iter()
        .position(|&b| b == b'\r')
        .map(|p| p + from)
}

/// Parses a length header strictly (Redis `string2ll`: optional `-`, digits, no
/// leading zeros, no `+`, no spaces). Returns `None` on anything else.
fn parse_len(digits: &[u8]) -> Option<i64> {
    crate::int::parse_i64(digits)
}

fn decode_multibulk(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<(Bytes, Vec<Bytes>)>, ProtocolError> {
    let Some(cr) = find_cr(buf, 1) else {
        if buf.len() > limits.max_inline_len {
            return Err(ProtocolError::TooBigMultibulkCount);
        }
        return Ok(None);
    };
    if cr + 1 >= buf.len() {
        return Ok(None); // the '\n' has not arrived
    }
    let count = parse_len(&buf[1..cr]).ok_or(ProtocolError::InvalidMultibulkLength)?;
    if count > limits.max_multibulk_len as i64 {
        return Err(ProtocolError::InvalidMultibulkLength);
    }
    if !limits.authenticated && count > UNAUTH_MAX_MULTIBULK_LEN as i64 {
        return Err(ProtocolError::UnauthenticatedMultibulkLength);
    }
    let mut pos = cr + 2;
    if count <= 0 {
        return Ok(Some((buf.split_to(pos).freeze(), Vec::new())));
    }
    // First pass: check that the whole request is here, without allocating.
    let count = count as usize;
    let body = pos;
    for _ in 0..count {
        if pos >= buf.len() {
            return Ok(None);
        }
        let Some(cr) = find_cr(buf, pos) else {
            if buf.len() - pos > limits.max_inline_len {
                return Err(ProtocolError::TooBigBulkCount);
            }
            if buf[pos] != b'$' {
                return Err(ProtocolError::ExpectedBulk { got: buf[pos] });
            }
            return Ok(None);
        };
        if buf[pos] != b'$' {
            return Err(ProtocolError::ExpectedBulk { got: buf[pos] });
        }
        if cr - pos > limits.max_inline_len {
            return Err(ProtocolError::TooBigBulkCount);
        }
        let len = parse_len(&buf[pos + 1..cr]).ok_or(ProtocolError::InvalidBulkLength)?;
        if len < 0 || len as u64 > limits.max_bulk_len as u64 {
            return Err(ProtocolError::InvalidBulkLength);
        }
        if !limits.authenticated && len as usize > UNAUTH_MAX_BULK_LEN {
            return Err(ProtocolError::UnauthenticatedBulkLength);
        }
        // Like Redis, the two bytes after the payload are skipped, not inspected.
        let end = cr + 2 + len as usize;
        if end + 2 > buf.len() {
            return Ok(None);
        }
        pos = end + 2;
    }
    // Second pass over the validated frame: slice each bulk out of it.
    let frame = buf.split_to(pos).freeze();
    let mut args = Vec::with_capacity(count);
    let mut at = body;
    for _ in 0..count {
        let cr = find_cr(&frame, at).expect("validated above");
        let len = parse_len(&frame[at + 1..cr]).expect("validated above") as usize;
        args.push(frame.slice(cr + 2..cr + 2 + len));
        at = cr + 4 + len;
    }
    Ok(Some((frame, args)))
}

fn decode_inline(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<(Bytes, Vec<Bytes>)>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_inline_len {
            return Err(ProtocolError::TooBigInline);
        }
        return Ok(None);
    };
    if nl > limits.max_inline_len {
        return Err(ProtocolError::TooBigInline);
    }
    let line = buf.split_to(nl + 1).freeze();
    let mut end = nl;
    if end > 0 && line[end - 1] == b'\r' {
        end -= 1;
    }
    let args = split_args(&line[..end]).ok_or(ProtocolError::UnbalancedQuotes)?;
    if !limits.authenticated && args.len() > UNAUTH_MAX_MULTIBULK_LEN {
        return Err(ProtocolError::UnauthenticatedMultibulkLength);
    }
    Ok(Some((line, args.into_iter().map(Bytes::from).collect())))
}

/// Encodes `args` as a RESP request array of bulk strings (what clients send).
pub fn encode_request<A: AsRef<[u8]>>(args: &[A], out: &mut BytesMut) {
    crate::reply::put_header(out, b'*', args.len() as i64);
    for a in args {
        let a = a.as_ref();
        crate::reply::put_header(out, b'$', a.len() as i64);
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(input: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        decode_request(&mut BytesMut::from(input), &Limits::default())
    }

    #[test]
    fn complete_multibulk() {
        let got = one(b"*2\r\n$4\r\nECHO\r\n$3\r\n*a*\r\n").unwrap().unwrap();
        assert_eq!(got, vec![Bytes::from("ECHO"), Bytes::from("*a*")]);
    }

    #[test]
    fn raw_gives_each_request_its_own_bytes() {
        let first = &b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"[..];
        let wire = [first, b"*0\r\n", b"PING x\r\n", b"*1\r\n$4\r\nPI"].concat();
        let mut buf = BytesMut::from(&wire[..]);
        let limits = Limits::default();
        let mut frames = Vec::new();
        while let Some((raw, args)) = decode_request_raw(&mut buf, &limits).unwrap() {
            frames.push((raw, args.len()));
        }
        let want: Vec<(Bytes, usize)> = vec![
            (Bytes::copy_from_slice(first), 2),
            (Bytes::from_static(b"*0\r\n"), 0),
            (Bytes::from_static(b"PING x\r\n"), 2),
        ];
        assert_eq!(frames, want);
        assert_eq!(&buf[..], b"*1\r\n$4\r\nPI", "a partial request stays");
    }

    #[test]
    fn every_prefix_is_incomplete() {
        let full = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n";
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(
                decode_request(&mut buf, &Limits::default()),
                Ok(None),
                "cut {cut}"
            );
            assert_eq!(buf.len(), cut, "nothing consumed at cut {cut}");
        }
        let got = one(full).unwrap().unwrap();
        assert_eq!(got[2], Bytes::from("a\r\nb"));
    }

    #[test]
    fn bad_lengths() {
        assert_eq!(
            one(b"*2\r\n$3\r\nGET\r\n$-1\r\n"),
            Err(ProtocolError::InvalidBulkLength)
        );
        assert_eq!(
            one(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$\r\n1\r\n"),
            Err(ProtocolError::InvalidBulkLength)
        );
        assert_eq!(
            one(b"*2\r\n$4\r\nECHO\r\n$536870913\r\n"),
            Err(ProtocolError::InvalidBulkLength)
        );
        assert_eq!(
            one(b"*1048577\r\n"),
            Err(ProtocolError::InvalidMultibulkLength)
        );
        assert_eq!(one(b"*x\r\n"), Err(ProtocolError::InvalidMultibulkLength));
        assert_eq!(
            one(b"*1\r\n*1\r\n$4\r\nPING\r\n"),
            Err(ProtocolError::ExpectedBulk { got: b'*' })
        );
    }

    #[test]
    fn empty_and_null_arrays_are_skipped() {
        let mut buf = BytesMut::from(&b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n"[..]);
        let l = Limits::default();
        assert_eq!(decode_request(&mut buf, &l).unwrap().unwrap().len(), 0);
        assert_eq!(decode_request(&mut buf, &l).unwrap().unwrap().len(), 0);
        assert_eq!(
            decode_request(&mut buf, &l).unwrap().unwrap(),
            vec![Bytes::from("PING")]
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn inline_requests() {
        let got = one(b"SET k \"a b\"\r\n").unwrap().unwrap();
        assert_eq!(
            got,
            vec![Bytes::from("SET"), Bytes::from("k"), Bytes::from("a b")]
        );
        assert_eq!(one(b"PING\n").unwrap().unwrap(), vec![Bytes::from("PING")]);
        assert_eq!(one(b"PING"), Ok(None));
        assert_eq!(one(b"\r\n").unwrap().unwrap().len(), 0);
        assert_eq!(one(b"SET \"k\r\n"), Err(ProtocolError::UnbalancedQuotes));
        let long = vec![b'a'; DEFAULT_MAX_INLINE_LEN + 1];
        assert_eq!(one(&long), Err(ProtocolError::TooBigInline));
    }

    #[test]
    fn pre_auth_limits() {
        let l = Limits {
            authenticated: false,
            ..Limits::default()
        };
        let mut b = BytesMut::from(&b"*11\r\n"[..]);
        assert_eq!(
            decode_request(&mut b, &l),
            Err(ProtocolError::UnauthenticatedMultibulkLength)
        );
        let mut b = BytesMut::from(&b"*2\r\n$4\r\nAUTH\r\n$16385\r\n"[..]);
        assert_eq!(
            decode_request(&mut b, &l),
            Err(ProtocolError::UnauthenticatedBulkLength)
        );
    }
}
