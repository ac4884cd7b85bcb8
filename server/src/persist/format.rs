//! The files' formats, without I/O.
//!
//! **Snapshot** (`dump.lhs`, and an append-only log's base file): the line
//! [`SNAPSHOT_MAGIC`] (`LEASEHOLD-SNAPSHOT 1`), then the records of a
//! full sync's body (`LH.SNAPSHOT <version> <replid> <offset> <unix ms>
//! <shards>`, `LH.FLUSHSLOTS 0 16383`, `LH.UNPINALL`, the run-time pins'
//! `LH.PIN`s, one record per key, `LH.SNAPEND <records> <crc>`), then the
//! trailer `LH.CHECKSUM <crc>`: a RESP array whose
//! second element is 8 lower-case hex digits, the CRC-32 (IEEE) of every
//! byte before the trailer. A file whose trailer is missing or does not
//! match is corrupt or truncated.
//!
//! **Log increment** (`<appendfilename>.<seq>.incr.aof`): the replication
//! stream as written, in segments; each segment is followed by the record
//! `LH.CRC <crc>`, the CRC-32 of the segment's bytes. A segment without its
//! `LH.CRC` at the end of the file is a torn last write; a segment whose
//! `LH.CRC` does not match, or bytes that are not RESP, are corruption.
//!
//! **Manifest** (`<appendfilename>.manifest`): one line per file, in load
//! order, as Redis 7 writes its own: `file <name> seq <n> type <b|h|i>`
//! (base, history, increment).

use bytes::BytesMut;
use leasehold_protocol::{decode_request, Limits};

/// A snapshot file's first line.
pub const SNAPSHOT_MAGIC: &[u8] = b"LEASEHOLD-SNAPSHOT 1\r\n";

/// The snapshot trailer's length: `*2\r\n$11\r\nLH.CHECKSUM\r\n$8\r\n<8 hex>\r\n`.
pub const TRAILER_LEN: usize = 36;

/// The snapshot trailer for a CRC.
pub fn trailer(crc: u32) -> Vec<u8> {
    format!("*2\r\n$11\r\nLH.CHECKSUM\r\n$8\r\n{crc:08x}\r\n").into_bytes()
}

/// The length of a log segment's checksum record.
pub const SEGMENT_CRC_LEN: usize = 30;

/// A log segment's checksum record: `*2\r\n$6\r\nLH.CRC\r\n$8\r\n<8 hex>\r\n`.
pub fn segment_crc(crc: u32) -> Vec<u8> {
    format!("*2\r\n$6\r\nLH.CRC\r\n$8\r\n{crc:08x}\r\n").into_bytes()
}

/// CRC-32 (IEEE) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(bytes);
    h.finalize()
}

/// A writer that hands every byte on to `W` and keeps their CRC-32 (as
/// [`crc32`]) and count, for a checksum over a stream too long to keep.
#[derive(Debug)]
pub struct CrcWriter<W> {
    inner: W,
    hasher: crc32fast::Hasher,
    written: u64,
}

impl<W> CrcWriter<W> {
    /// Starts a checksum over what is written to `inner` from now on.
    pub fn new(inner: W) -> CrcWriter<W> {
        CrcWriter {
            inner,
            hasher: crc32fast::Hasher::new(),
            written: 0,
        }
    }

    /// The CRC-32 of every byte written so far.
    pub fn crc(&self) -> u32 {
        self.hasher.clone().finalize()
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The writer underneath, for bytes the checksum must not cover.
    pub fn inner_mut(&mut self) -> &mut W {
        &mut self.inner
    }
}

impl<W: std::io::Write> std::io::Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Why a file cannot be loaded as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// Not a file of ours (no magic line).
    NotOurs,
    /// The checksum trailer is missing: the file is cut short.
    Truncated,
    /// The checksum does not match, or a record is not RESP: the bytes changed.
    Corrupt(String),
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::NotOurs => f.write_str("not a Leasehold snapshot (no LEASEHOLD-SNAPSHOT line)"),
            Damage::Truncated => f.write_str("truncated (no checksum trailer)"),
            Damage::Corrupt(why) => write!(f, "corrupt: {why}"),
        }
    }
}

/// Checks a whole snapshot file; returns its body (the records between the
/// magic line and the trailer).
///
/// # Errors
/// See [`Damage`]; [`Damage::Truncated`] and [`Damage::Corrupt`] still
/// give the body as far as it goes, for a load told to accept it.
pub fn check_snapshot(file: &[u8]) -> Result<&[u8], (Damage, &[u8])> {
    let Some(rest) = file.strip_prefix(SNAPSHOT_MAGIC) else {
        return Err((Damage::NotOurs, &[]));
    };
    let has_trailer = rest.len() >= TRAILER_LEN
        && rest[rest.len() - TRAILER_LEN..].starts_with(b"*2\r\n$11\r\nLH.CHECKSUM\r\n$8\r\n");
    if !has_trailer {
        return Err((Damage::Truncated, rest));
    }
    let (body, tail) = rest.split_at(rest.len() - TRAILER_LEN);
    let got = crc32(&file[..file.len() - TRAILER_LEN]);
    match tail == trailer(got).as_slice() {
        true => Ok(body),
        false => Err((
            Damage::Corrupt(format!(
                "checksum {got:08x}, the trailer says {:?}",
                String::from_utf8_lossy(&tail[TRAILER_LEN - 10..TRAILER_LEN - 2])
            )),
            body,
        )),
    }
}

/// Decoder limits for our own files: every record was accepted once.
pub fn file_limits() -> Limits {
    Limits {
        max_bulk_len: i64::MAX as usize,
        max_multibulk_len: i64::MAX as usize,
        max_inline_len: 64 * 1024,
        authenticated: true,
    }
}

/// What [`check_increment`] found in a log increment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Increment {
    /// Bytes from the start that are whole, verified segments.
    pub verified: usize,
    /// Bytes after them (a torn last write), 0 when the file ends clean.
    pub torn: usize,
}

/// Checks a log increment segment by segment.
///
/// # Errors
/// [`Damage::Corrupt`] at the first segment whose `LH.CRC` does not match,
/// or at bytes that are not RESP, naming the offset.
pub fn check_increment(file: &[u8]) -> Result<Increment, Damage> {
    let limits = file_limits();
    let mut buf = BytesMut::from(file);
    let mut pos = 0usize;
    let mut segment = 0usize;
    loop {
        let before = buf.len();
        match decode_request(&mut buf, &limits) {
            Ok(Some(items)) => {
                let len = before - buf.len();
                let is_crc = items.len() == 2 && items[0].eq_ignore_ascii_case(b"LH.CRC");
                if is_crc {
                    let want = std::str::from_utf8(&items[1])
                        .ok()
                        .and_then(|h| u32::from_str_radix(h, 16).ok());
                    let got = crc32(&file[segment..pos]);
                    if want != Some(got) {
                        return Err(Damage::Corrupt(format!(
                            "the segment at byte {segment} has checksum {got:08x}, its LH.CRC says {}",
                            String::from_utf8_lossy(&items[1])
                        )));
                    }
                    segment = pos + len;
                }
                pos += len;
            }
            Ok(None) => {
                // A torn write is a prefix of one segment and its LH.CRC.
                // Bytes that end with a whole LH.CRC record, or after which
                // whole segments verify again, were written whole: a
                // record's length was damaged (a value may itself hold the
                // bytes of an LH.CRC record, which proves nothing alone).
                let tail = &file[segment..];
                if damaged_not_torn(tail) {
                    return Err(Damage::Corrupt(format!(
                        "a record's length at or after byte {segment} runs past later checksummed segments"
                    )));
                }
                return Ok(Increment {
                    verified: segment,
                    torn: file.len() - segment,
                });
            }
            Err(e) => {
                return Err(Damage::Corrupt(format!("bad record at byte {pos}: {e}")));
            }
        }
    }
}

/// Whether bytes that do not decode after the last verified segment are a
/// damaged length rather than a torn write: they end with a whole LH.CRC
/// record, or whole segments verify after one inside them.
fn damaged_not_torn(tail: &[u8]) -> bool {
    let head = b"*2\r\n$6\r\nLH.CRC\r\n$8\r\n";
    let is_crc_at = |p: usize| {
        tail.get(p..p + SEGMENT_CRC_LEN)
            .is_some_and(|r| r.starts_with(head) && r.ends_with(b"\r\n"))
    };
    if tail.len() >= SEGMENT_CRC_LEN && is_crc_at(tail.len() - SEGMENT_CRC_LEN) {
        return true;
    }
    let mut from = 0;
    while let Some(p) = tail[from..].windows(head.len()).position(|w| w == head) {
        let after = from + p + SEGMENT_CRC_LEN;
        if is_crc_at(from + p)
            && after < tail.len()
            && check_increment(&tail[after..]).is_ok_and(|i| i.verified > 0)
        {
            return true;
        }
        from += p + 1;
    }
    false
}

/// The end of the RESP array of bulk strings that starts at `at` in
/// `buf` (a record of the stream), if it is whole there.
pub fn record_end(buf: &[u8], at: usize) -> Option<usize> {
    let line = |from: usize| -> Option<(i64, usize)> {
        let end = from + buf.get(from..)?.windows(2).position(|w| w == b"\r\n")?;
        let n = leasehold_protocol::int::parse_i64(buf.get(from + 1..end)?)?;
        Some((n, end + 2))
    };
    if buf.get(at) != Some(&b'*') {
        return None;
    }
    let (items, mut pos) = line(at)?;
    for _ in 0..items.max(0) {
        if buf.get(pos) != Some(&b'$') {
            return None;
        }
        let (len, start) = line(pos)?;
        pos = start + usize::try_from(len).ok()? + 2;
        if pos > buf.len() {
            return None;
        }
    }
    Some(pos)
}

/// One line of the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestEntry {
    /// The file's name inside the append-only directory.
    pub name: String,
    /// Its sequence number.
    pub seq: u64,
    /// `b` (base), `h` (history: a base or increment being replaced), `i`
    /// (increment).
    pub kind: char,
}

/// Parses a manifest.
///
/// # Errors
/// The line that is not `file <name> seq <n> type <b|h|i>`.
pub fn parse_manifest(text: &str) -> Result<Vec<ManifestEntry>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("manifest line {}: {line:?}", n + 1);
        let ok = w.len() == 6 && w[0] == "file" && w[2] == "seq" && w[4] == "type";
        if !ok {
            return Err(bad());
        }
        let seq = w[3].parse().map_err(|_| bad())?;
        // A name, never a path: nothing outside the log's directory.
        if w[1].contains('/') || w[1] == "." || w[1] == ".." {
            return Err(bad());
        }
        let kind = match w[5] {
            "b" => 'b',
            "h" => 'h',
            "i" => 'i',
            _ => return Err(bad()),
        };
        out.push(ManifestEntry {
            name: w[1].to_string(),
            seq,
            kind,
        });
    }
    Ok(out)
}

/// A manifest's text.
pub fn render_manifest(entries: &[ManifestEntry]) -> String {
    entries
        .iter()
        .map(|e| format!("file {} seq {} type {}\n", e.name, e.seq, e.kind))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(body: &[u8]) -> Vec<u8> {
        let mut f = SNAPSHOT_MAGIC.to_vec();
        f.extend_from_slice(body);
        let crc = crc32(&f);
        f.extend_from_slice(&trailer(crc));
        f
    }

    #[test]
    fn trailer_has_its_fixed_length() {
        assert_eq!(trailer(0xdeadbeef).len(), TRAILER_LEN);
        assert_eq!(segment_crc(1).len(), SEGMENT_CRC_LEN);
    }

    #[test]
    fn a_snapshot_checks_and_every_damage_is_seen() {
        let body = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        let f = snapshot(body);
        assert_eq!(check_snapshot(&f), Ok(&body[..]));
        // Cut anywhere: truncated.
        for cut in [f.len() - 1, f.len() - TRAILER_LEN, SNAPSHOT_MAGIC.len() + 3] {
            assert_eq!(check_snapshot(&f[..cut]).unwrap_err().0, Damage::Truncated);
        }
        // Any one bit flipped after the magic line: refused.
        for i in SNAPSHOT_MAGIC.len()..f.len() {
            let mut g = f.clone();
            g[i] ^= 0x10;
            assert!(check_snapshot(&g).is_err(), "flip at {i} passed");
        }
        assert_eq!(check_snapshot(b"REDIS0011").unwrap_err().0, Damage::NotOurs);
    }

    #[test]
    fn an_increment_keeps_its_verified_segments_and_sees_a_torn_tail() {
        let seg = b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".to_vec();
        let mut f = seg.clone();
        f.extend_from_slice(&segment_crc(crc32(&seg)));
        let clean = f.len();
        assert_eq!(
            check_increment(&f),
            Ok(Increment {
                verified: clean,
                torn: 0
            })
        );
        // A segment written without its checksum yet: torn.
        f.extend_from_slice(&seg);
        assert_eq!(
            check_increment(&f),
            Ok(Increment {
                verified: clean,
                torn: seg.len()
            })
        );
        // Half a record: torn too.
        let half = &f[..clean + 5];
        assert_eq!(
            check_increment(half),
            Ok(Increment {
                verified: clean,
                torn: 5
            })
        );
        // A value's length made longer than the rest of the file swallows
        // the checksummed segments after it: corrupt, not torn.
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n".to_vec();
        let mut g = f[..clean].to_vec();
        for s in [&set, &seg] {
            g.extend_from_slice(s);
            g.extend_from_slice(&segment_crc(crc32(s)));
        }
        let at = clean + set.len() - 7; // the value's `$1`
        assert_eq!(&g[at..at + 2], b"$1");
        g[at + 1] = b'9';
        g.insert(at + 2, b'9');
        assert!(matches!(check_increment(&g), Err(Damage::Corrupt(_))));
        // A torn write whose value holds the bytes of an LH.CRC record is
        // still a torn write.
        let mut torn = f[..clean].to_vec();
        torn.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\n");
        torn.extend_from_slice(&segment_crc(7));
        torn.extend_from_slice(b"more of the value");
        assert_eq!(
            check_increment(&torn),
            Ok(Increment {
                verified: clean,
                torn: torn.len() - clean
            })
        );
        // A flipped byte inside a verified segment's value: corrupt.
        let mut g = f.clone();
        g[seg.len() - 3] = b'x';
        assert!(matches!(check_increment(&g), Err(Damage::Corrupt(_))));
    }

    #[test]
    fn record_end_finds_each_whole_record() {
        let a = b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n";
        let b = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n";
        let buf = [&a[..], &b[..]].concat();
        assert_eq!(record_end(&buf, 0), Some(a.len()));
        assert_eq!(record_end(&buf, a.len()), Some(buf.len()));
        assert_eq!(record_end(&buf[..buf.len() - 1], a.len()), None);
        assert_eq!(record_end(b"PING\r\n", 0), None);
    }

    #[test]
    fn manifests_round_trip() {
        let e = vec![
            ManifestEntry {
                name: "appendonly.aof.1.base.lhs".into(),
                seq: 1,
                kind: 'b',
            },
            ManifestEntry {
                name: "appendonly.aof.1.incr.aof".into(),
                seq: 1,
                kind: 'i',
            },
        ];
        assert_eq!(parse_manifest(&render_manifest(&e)), Ok(e));
        assert!(parse_manifest("file x seq one type b\n").is_err());
        assert!(parse_manifest("file ../victim.aof seq 1 type i\n").is_err());
    }
}
