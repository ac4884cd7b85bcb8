//! Replies and their encoding in RESP2 or RESP3.
//!
//! Handlers build a [`Reply`] tree; the connection encodes it once per batch with
//! the protocol version the client chose with `HELLO` ([`Protocol`]). RESP3-only
//! shapes degrade to their RESP2 forms as Redis does: a null is `$-1` (or `*-1`
//! for a null array), a map is a flat array of key, value, ..., a set is an
//! array, a double is a bulk string, a verbatim string is a bulk string, a
//! push is an array.

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

/// The RESP version a connection speaks: 2 until `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, the default for every new connection.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

/// A reply to one command.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`-style simple string; must not contain `\r` or `\n`.
    Simple(Cow<'static, str>),
    /// An error; the text starts with its code (`ERR`, `WRONGTYPE`, ...).
    Error(Cow<'static, str>),
    /// A 64-bit signed integer.
    Int(i64),
    /// A binary-safe bulk string.
    Bulk(Bytes),
    /// The null bulk string (`$-1` in RESP2, `_` in RESP3).
    Nil,
    /// The null array (`*-1` in RESP2, `_` in RESP3).
    NilArray,
    /// An array of replies.
    Array(Vec<Reply>),
    /// A map (`%` in RESP3, a flat array in RESP2).
    Map(Vec<(Reply, Reply)>),
    /// A set (`~` in RESP3, an array in RESP2).
    Set(Vec<Reply>),
    /// A double (`,` in RESP3, a bulk string in RESP2).
    Double(f64),
    /// A boolean (`#t`/`#f` in RESP3, `:1`/`:0` in RESP2).
    Bool(bool),
    /// A verbatim string with a three-letter format such as `txt` (`=` in RESP3,
    /// a bulk string in RESP2).
    Verbatim(&'static str, Bytes),
    /// An out-of-band push (`>` in RESP3, an array in RESP2): pub/sub
    /// messages and subscription confirmations.
    Push(Vec<Reply>),
    /// Several replies to one request, encoded one after another (SUBSCRIBE
    /// of n channels answers n pushes); never nested inside another reply.
    Several(Vec<Reply>),
    /// Pairs (a field and its value, a member and its score): an array of
    /// two-element arrays in RESP3, one flat array of both in RESP2, as
    /// Redis answers HRANDFIELD WITHVALUES.
    Pairs(Vec<(Reply, Reply)>),
    /// An array, map or set of bulk strings encoded as they were gathered
    /// (see [`Bulks`]): a long range of a list or hash costs one buffer,
    /// not an allocation per element.
    Bulks(Box<Bulks>),
}

/// What kind of aggregate a [`Bulks`] reply is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// `*n`: an array of the strings.
    Array,
    /// `%n` in RESP3 with the strings as key, value, key, value...; a flat
    /// array of them in RESP2 (an odd string out is never written: the
    /// builder's user pushes pairs).
    Map,
    /// `~n` in RESP3, an array in RESP2.
    Set,
}

/// Bulk strings encoded into one buffer as they are pushed: a bulk string
/// reads the same in RESP2 and RESP3, so only the aggregate's header waits
/// for the encoding, which writes it and copies the body once.
#[derive(Debug, Clone, PartialEq)]
pub struct Bulks {
    kind: Aggregate,
    count: usize,
    body: BytesMut,
}

impl Bulks {
    /// An empty aggregate of `kind` with room for `bytes` of body.
    pub fn with_capacity(kind: Aggregate, bytes: usize) -> Bulks {
        Bulks {
            kind,
            count: 0,
            body: BytesMut::with_capacity(bytes),
        }
    }

    /// Appends one bulk string.
    pub fn push(&mut self, s: &[u8]) {
        self.body.reserve(s.len() + 16);
        put_bulk(&mut self.body, s);
        self.count += 1;
    }

    /// How many strings were pushed.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The strings pushed, in order (read back from the encoded body).
    pub fn items(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut rest = &self.body[..];
        std::iter::from_fn(move || {
            // Each item is `$<len>\r\n<bytes>\r\n`, as `push` wrote it.
            let end = rest.iter().position(|&b| b == b'\r')?;
            let len: usize = std::str::from_utf8(&rest[1..end]).ok()?.parse().ok()?;
            let item = &rest[end + 2..end + 2 + len];
            rest = &rest[end + 4 + len..];
            Some(item)
        })
    }

    fn encode(&self, proto: Protocol, out: &mut BytesMut) {
        let n = self.count as i64;
        match (self.kind, proto) {
            (Aggregate::Map, Protocol::Resp3) => put_header(out, b'%', n / 2),
            (Aggregate::Set, Protocol::Resp3) => put_header(out, b'~', n),
            _ => put_header(out, b'*', n),
        }
        out.extend_from_slice(&self.body);
    }
}

impl Bulks {
    /// The same aggregate as ordinary replies (an array, map or set of bulk
    /// strings), for readers that walk replies (scripts) rather than
    /// encode them.
    pub fn to_plain(&self) -> Reply {
        let bulk = |s: &[u8]| Reply::Bulk(Bytes::copy_from_slice(s));
        match self.kind {
            Aggregate::Array => Reply::Array(self.items().map(bulk).collect()),
            Aggregate::Set => Reply::Set(self.items().map(bulk).collect()),
            Aggregate::Map => {
                let items: Vec<Reply> = self.items().map(bulk).collect();
                let mut it = items.into_iter();
                let mut pairs = Vec::new();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                Reply::Map(pairs)
            }
        }
    }
}

impl Reply {
    /// A compact aggregate ([`Reply::Bulks`], [`Reply::Pairs`]) as the
    /// ordinary replies it encodes to in `proto`; `None` for every other
    /// reply (already ordinary).
    pub fn to_plain(&self, proto: Protocol) -> Option<Reply> {
        Some(match self {
            Reply::Bulks(b) => b.to_plain(),
            Reply::Pairs(pairs) => match proto {
                Protocol::Resp3 => Reply::Array(
                    pairs
                        .iter()
                        .map(|(a, b)| Reply::Array(vec![a.clone(), b.clone()]))
                        .collect(),
                ),
                Protocol::Resp2 => Reply::Array(
                    pairs
                        .iter()
                        .flat_map(|(a, b)| [a.clone(), b.clone()])
                        .collect(),
                ),
            },
            _ => return None,
        })
    }
}

impl From<Bulks> for Reply {
    fn from(b: Bulks) -> Reply {
        Reply::Bulks(Box::new(b))
    }
}

impl Reply {
    /// `+OK`.
    pub const fn ok() -> Reply {
        Reply::Simple(Cow::Borrowed("OK"))
    }

    /// A simple string from static text.
    pub const fn simple(s: &'static str) -> Reply {
        Reply::Simple(Cow::Borrowed(s))
    }

    /// An error reply from static text (the text includes its code, e.g. `ERR ...`).
    pub const fn err(s: &'static str) -> Reply {
        Reply::Error(Cow::Borrowed(s))
    }

    /// An error reply from formatted text.
    pub fn err_owned(s: String) -> Reply {
        Reply::Error(Cow::Owned(s))
    }

    /// A bulk string copied from `s`.
    pub fn bulk(s: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(Bytes::copy_from_slice(s.as_ref()))
    }

    /// Whether this reply is an error.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Encodes this reply for `proto` at the end of `out`.
    pub fn encode(&self, proto: Protocol, out: &mut BytesMut) {
        match self {
            Reply::Simple(s) => put_line(out, b'+', s.as_bytes()),
            Reply::Error(s) => put_line(out, b'-', s.as_bytes()),
            Reply::Int(i) => put_header(out, b':', *i),
            Reply::Bulk(b) => put_bulk(out, b),
            Reply::Nil => match proto {
                Protocol::Resp2 => out.extend_from_slice(b"$-1\r\n"),
                Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::NilArray => match proto {
                Protocol::Resp2 => out.extend_from_slice(b"*-1\r\n"),
                Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
            },
            Reply::Array(items) => {
                put_header(out, b'*', items.len() as i64);
                for r in items {
                    r.encode(proto, out);
                }
            }
            Reply::Push(items) => {
                let tag = if proto == Protocol::Resp3 { b'>' } else { b'*' };
                put_header(out, tag, items.len() as i64);
                for r in items {
                    r.encode(proto, out);
                }
            }
            Reply::Several(replies) => {
                for r in replies {
                    r.encode(proto, out);
                }
            }
            Reply::Bulks(b) => b.encode(proto, out),
            Reply::Pairs(pairs) => {
                match proto {
                    Protocol::Resp3 => put_header(out, b'*', pairs.len() as i64),
                    Protocol::Resp2 => put_header(out, b'*', 2 * pairs.len() as i64),
                }
                for (a, b) in pairs {
                    if proto == Protocol::Resp3 {
                        out.extend_from_slice(b"*2\r\n");
                    }
                    a.encode(proto, out);
                    b.encode(proto, out);
                }
            }
            Reply::Set(items) => {
                let tag = if proto == Protocol::Resp3 { b'~' } else { b'*' };
                put_header(out, tag, items.len() as i64);
                for r in items {
                    r.encode(proto, out);
                }
            }
            Reply::Map(pairs) => {
                match proto {
                    Protocol::Resp3 => put_header(out, b'%', pairs.len() as i64),
                    Protocol::Resp2 => put_header(out, b'*', 2 * pairs.len() as i64),
                }
                for (k, v) in pairs {
                    k.encode(proto, out);
                    v.encode(proto, out);
                }
            }
            Reply::Double(d) => {
                let text = format_double(*d);
                match proto {
                    Protocol::Resp3 => put_line(out, b',', text.as_bytes()),
                    Protocol::Resp2 => put_bulk(out, text.as_bytes()),
                }
            }
            Reply::Bool(b) => match proto {
                Protocol::Resp3 => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
                Protocol::Resp2 => put_header(out, b':', i64::from(*b)),
            },
            Reply::Verbatim(format, body) => match proto {
                Protocol::Resp3 => {
                    put_header(out, b'=', body.len() as i64 + 4);
                    out.extend_from_slice(format.as_bytes());
                    out.put_u8(b':');
                    out.extend_from_slice(body);
                    out.extend_from_slice(b"\r\n");
                }
                Protocol::Resp2 => put_bulk(out, body),
            },
        }
    }

    /// Encodes into a fresh buffer; convenient in tests.
    pub fn to_bytes(&self, proto: Protocol) -> Bytes {
        let mut out = BytesMut::new();
        self.encode(proto, &mut out);
        out.freeze()
    }
}

/// Formats a double as Redis 7.0's `addReplyDouble` does, RESP2 and RESP3
/// alike: C's `%.17g` (`0.1` is `0.10000000000000001`, `1e300` is
/// `1.0000000000000001e+300`, a NaN `nan` or `-nan` by its sign bit).
pub fn format_double(d: f64) -> String {
    format_g(d, 17)
}

/// C's `%.<precision>g` (glibc's, precision at least 1): the shorter of
/// fixed and exponent notation for that many significant digits, trailing
/// zeros dropped, the exponent at least two digits (`1e+20`); `inf`,
/// `-inf`, and `nan` or `-nan` by the NaN's sign bit (`0/0` is negative on
/// x86-64). Lua prints numbers with `%.14g`, Redis's scripting converts a
/// number argument with `%.17g`.
pub fn format_g(d: f64, precision: usize) -> String {
    let p = precision.max(1);
    if !d.is_finite() {
        let text = if d.is_nan() { "nan" } else { "inf" };
        return if d.is_sign_negative() {
            format!("-{text}")
        } else {
            text.into()
        };
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    // An integral value of at most `p` digits prints as those digits, so
    // the common case (counters, milliseconds) skips the float formatting.
    if d.fract() == 0.0 && d.abs() < 10f64.powi(p.min(17) as i32) {
        return itoa::Buffer::new().format(d as i64).to_string();
    }
    // Rounded to p significant digits first: the exponent of the rounded
    // value decides the notation, as C does.
    let sci = format!("{:.*e}", p - 1, d);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let m = trim_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.unsigned_abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        trim_zeros(&format!("{:.*}", decimals, d)).to_string()
    }
}

/// `1.500` -> `1.5`, `2.000` -> `2`; text without a point is unchanged.
fn trim_zeros(s: &str) -> &str {
    if !s.contains('.') {
        return s;
    }
    s.trim_end_matches('0').trim_end_matches('.')
}

/// Writes `<tag><n>\r\n`.
pub(crate) fn put_header(out: &mut BytesMut, tag: u8, n: i64) {
    let mut b = itoa::Buffer::new();
    out.reserve(24);
    out.put_u8(tag);
    out.extend_from_slice(b.format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn put_line(out: &mut BytesMut, tag: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(tag);
    out.extend_from_slice(text);
    out.extend_from_slice(b"\r\n");
}

fn put_bulk(out: &mut BytesMut, b: &[u8]) {
    put_header(out, b'$', b.len() as i64);
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_g_matches_c() {
        assert_eq!(format_g(0.1, 17), "0.10000000000000001");
        assert_eq!(format_g(1e300, 17), "1.0000000000000001e+300");
        assert_eq!(format_g(1e21, 17), "1e+21");
        assert_eq!(format_g(1712345678901.0, 17), "1712345678901");
        assert_eq!(format_g(-42.0, 14), "-42");
        assert_eq!(format_g(99999999999999.0, 14), "99999999999999");
        assert_eq!(format_g(100000000000000.0, 14), "1e+14");
        assert_eq!(format_g(1e17, 17), "1e+17");
        assert_eq!(format_g(12345678901234567.0, 17), "12345678901234568");
        assert_eq!(format_g(1.234_567_890_123_456_7, 14), "1.2345678901235");
        assert_eq!(format_g(1e20, 14), "1e+20");
        assert_eq!(format_g(100.0, 14), "100");
        assert_eq!(format_g(1.5, 17), "1.5");
        assert_eq!(format_g(0.0001, 14), "0.0001");
        assert_eq!(format_g(0.00001, 14), "1e-05");
        assert_eq!(format_g(-2.5, 14), "-2.5");
        assert_eq!(format_g(123456789012345.0, 14), "1.2345678901234e+14");
        assert_eq!(format_double(3.0), "3");
        assert_eq!(format_g(f64::NAN, 17), "nan");
        assert_eq!(format_g(-f64::NAN, 14), "-nan");
        assert_eq!(format_double(f64::NEG_INFINITY), "-inf");
        assert_eq!(format_double(f64::INFINITY), "inf");
    }

    #[test]
    fn push_is_an_array_in_resp2_and_several_is_concatenated() {
        let push = Reply::Push(vec![Reply::bulk("message"), Reply::bulk("ch"), Reply::Nil]);
        assert_eq!(
            &push.to_bytes(Protocol::Resp3)[..],
            b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n_\r\n"
        );
        assert_eq!(
            &push.to_bytes(Protocol::Resp2)[..],
            b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$-1\r\n"
        );
        let several = Reply::Several(vec![Reply::Int(1), Reply::ok()]);
        assert_eq!(&several.to_bytes(Protocol::Resp2)[..], b":1\r\n+OK\r\n");
        assert_eq!(
            &Reply::Several(Vec::new()).to_bytes(Protocol::Resp3)[..],
            b""
        );
    }

    #[test]
    fn bulks_encode_like_the_replies_they_stand_for() {
        let words: [&[u8]; 4] = [b"f1", b"", b"a\r\nb", b"v2"];
        for (kind, plain) in [
            (
                Aggregate::Array,
                Reply::Array(words.iter().map(Reply::bulk).collect()),
            ),
            (
                Aggregate::Set,
                Reply::Set(words.iter().map(Reply::bulk).collect()),
            ),
            (
                Aggregate::Map,
                Reply::Map(vec![
                    (Reply::bulk(words[0]), Reply::bulk(words[1])),
                    (Reply::bulk(words[2]), Reply::bulk(words[3])),
                ]),
            ),
        ] {
            let mut b = Bulks::with_capacity(kind, 0);
            for w in words {
                b.push(w);
            }
            assert_eq!(b.len(), 4);
            assert_eq!(b.items().collect::<Vec<_>>(), words.to_vec());
            let packed = Reply::from(b);
            for proto in [Protocol::Resp2, Protocol::Resp3] {
                assert_eq!(
                    packed.to_bytes(proto),
                    plain.to_bytes(proto),
                    "{kind:?} {proto:?}"
                );
            }
        }
        let pairs = Reply::Pairs(vec![(Reply::bulk("f"), Reply::bulk("v"))]);
        assert_eq!(
            &pairs.to_bytes(Protocol::Resp2)[..],
            b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        );
        assert_eq!(
            &pairs.to_bytes(Protocol::Resp3)[..],
            b"*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        );
        let empty = Reply::from(Bulks::with_capacity(Aggregate::Map, 0));
        assert_eq!(&empty.to_bytes(Protocol::Resp3)[..], b"%0\r\n");
        assert_eq!(&empty.to_bytes(Protocol::Resp2)[..], b"*0\r\n");
    }
}
