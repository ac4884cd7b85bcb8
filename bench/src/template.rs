//! Command templates: a command line with placeholders, encoded once as RESP
//! with holes that each request overwrites in place.
//!
//! Placeholders (memtier and redis-benchmark style):
//! - `__key__` anywhere inside an argument: the key index, zero-padded to
//!   [`KEY_DIGITS`] decimal digits (`tb:__key__` -> `tb:000000004711`).
//! - `__sha__`: the SHA1 of the script loaded with `--script` (fixed per run).
//!
//! Because every key has the same width, every request has the same length:
//! a request is a copy of the encoded template plus a few digit writes, which
//! keeps the generator cheap next to the server under test.

use bytes::BytesMut;
use leasehold_protocol::encode_request;

/// The placeholder for a key index.
pub const KEY: &str = "__key__";
/// The placeholder for the loaded script's SHA1.
pub const SHA: &str = "__sha__";
/// Digits a key index expands to (as redis-benchmark's `__rand_int__`).
pub const KEY_DIGITS: usize = 12;

/// A parsed, pre-encoded command template.
#[derive(Debug, Clone)]
pub struct Template {
    encoded: Vec<u8>,
    /// Byte offsets in `encoded` where a key's digits start.
    holes: Vec<usize>,
    name: String,
}

/// Why a template could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TemplateError {
    /// The template has no command.
    Empty,
    /// A quote is not closed (Redis's inline quoting rules apply).
    UnbalancedQuotes,
    /// `__sha__` is used but no script was loaded.
    ShaWithoutScript,
}

impl std::fmt::Display for TemplateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TemplateError::Empty => write!(f, "empty command template"),
            TemplateError::UnbalancedQuotes => write!(f, "unbalanced quotes in command template"),
            TemplateError::ShaWithoutScript => {
                write!(f, "{SHA} in the command template needs --script")
            }
        }
    }
}

impl std::error::Error for TemplateError {}

impl Template {
    /// Parses `text` with Redis's inline quoting rules, substituting `sha` for
    /// `__sha__` and leaving a hole per `__key__`.
    ///
    /// # Errors
    /// [`TemplateError`] for an empty template, unbalanced quotes, or `__sha__`
    /// with `sha` = `None`.
    pub fn parse(text: &str, sha: Option<&str>) -> Result<Template, TemplateError> {
        let args = leasehold_protocol::inline::split_args(text.as_bytes())
            .ok_or(TemplateError::UnbalancedQuotes)?;
        if args.is_empty() {
            return Err(TemplateError::Empty);
        }
        let zeros = "0".repeat(KEY_DIGITS);
        let mut expanded = Vec::with_capacity(args.len());
        for arg in &args {
            let mut s = String::from_utf8_lossy(arg).into_owned();
            if s.contains(SHA) {
                s = s.replace(SHA, sha.ok_or(TemplateError::ShaWithoutScript)?);
            }
            expanded.push(s.replace(KEY, &zeros));
        }
        let mut out = BytesMut::new();
        encode_request(&expanded, &mut out);
        // Walk the encoding `*N\r\n` then `$len\r\n<arg>\r\n` per argument to
        // find where each argument's bytes start.
        let mut holes = Vec::new();
        let mut pos = format!("*{}\r\n", expanded.len()).len();
        for (raw, exp) in args.iter().zip(&expanded) {
            let start = pos + format!("${}\r\n", exp.len()).len();
            let raw = String::from_utf8_lossy(raw);
            let raw = match sha {
                Some(sha) => raw.replace(SHA, sha),
                None => raw.into_owned(),
            };
            // Offsets of each placeholder in the expanded argument: every
            // earlier placeholder grew from KEY.len() to KEY_DIGITS bytes.
            for (n, (i, _)) in raw.match_indices(KEY).enumerate() {
                holes.push(start + i + n * (KEY_DIGITS - KEY.len()));
            }
            pos = start + exp.len() + 2;
        }
        Ok(Template {
            encoded: out.to_vec(),
            holes,
            name: String::from_utf8_lossy(&args[0]).to_ascii_uppercase(),
        })
    }

    /// The command name, upper-cased (`SET`, `EVALSHA`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the template has a `__key__` placeholder.
    pub fn has_key(&self) -> bool {
        !self.holes.is_empty()
    }

    /// Appends one request for key index `key` to `out`.
    ///
    /// # Panics
    /// If `key` has more than [`KEY_DIGITS`] digits.
    pub fn write(&self, key: u64, out: &mut BytesMut) {
        let start = out.len();
        out.extend_from_slice(&self.encoded);
        if self.holes.is_empty() {
            return;
        }
        let mut digits = [b'0'; KEY_DIGITS];
        let mut k = key;
        for d in digits.iter_mut().rev() {
            *d = b'0' + (k % 10) as u8;
            k /= 10;
        }
        assert_eq!(k, 0, "key index {key} wider than {KEY_DIGITS} digits");
        for &h in &self.holes {
            out[start + h..start + h + KEY_DIGITS].copy_from_slice(&digits);
        }
    }

    /// The arguments of the request for key index `key` (for probes and logs).
    pub fn args(&self, key: u64) -> Vec<bytes::Bytes> {
        let mut buf = BytesMut::new();
        self.write(key, &mut buf);
        leasehold_protocol::decode_request(&mut buf, &leasehold_protocol::Limits::default())
            .ok()
            .flatten()
            .expect("a template encodes as a valid request")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(t: &Template, key: u64) -> Vec<u8> {
        let mut out = BytesMut::new();
        t.write(key, &mut out);
        out.to_vec()
    }

    #[test]
    fn fixed_command_has_no_holes() {
        let t = Template::parse("PING", None).unwrap();
        assert!(!t.has_key());
        assert_eq!(t.name(), "PING");
        assert_eq!(request(&t, 5), b"*1\r\n$4\r\nPING\r\n");
    }

    #[test]
    fn key_is_zero_padded_in_place() {
        let t = Template::parse("set k:__key__ \"a b\"", None).unwrap();
        assert_eq!(t.name(), "SET");
        assert_eq!(
            request(&t, 4711),
            b"*3\r\n$3\r\nset\r\n$14\r\nk:000000004711\r\n$3\r\na b\r\n"
        );
        assert_eq!(
            request(&t, 999_999_999_999),
            b"*3\r\n$3\r\nset\r\n$14\r\nk:999999999999\r\n$3\r\na b\r\n"
        );
    }

    #[test]
    fn several_keys_in_one_argument_and_across_arguments() {
        let t = Template::parse("MSET __key__-__key__ v __key__ w", None).unwrap();
        let args = t.args(42);
        assert_eq!(&args[1][..], b"000000000042-000000000042");
        assert_eq!(&args[3][..], b"000000000042");
        assert_eq!(&args[4][..], b"w");
    }

    #[test]
    fn sha_is_substituted_once() {
        let t =
            Template::parse("EVALSHA __sha__ 1 tb:__key__ 100 10 1000 1", Some("abc123")).unwrap();
        let args = t.args(7);
        assert_eq!(&args[1][..], b"abc123");
        assert_eq!(&args[3][..], b"tb:000000000007");
        assert_eq!(args.len(), 8);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Template::parse("   ", None).unwrap_err(),
            TemplateError::Empty
        );
        assert_eq!(
            Template::parse("SET \"k v", None).unwrap_err(),
            TemplateError::UnbalancedQuotes
        );
        assert_eq!(
            Template::parse("EVALSHA __sha__ 0", None).unwrap_err(),
            TemplateError::ShaWithoutScript
        );
    }

    #[test]
    #[should_panic(expected = "wider than")]
    fn key_too_wide_panics() {
        let t = Template::parse("GET __key__", None).unwrap();
        request(&t, 10u64.pow(KEY_DIGITS as u32));
    }
}
