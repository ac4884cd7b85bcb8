//! Redis's glob patterns (`stringmatchlen`), for KEYS, SCAN MATCH, CONFIG
//! GET and the pub/sub patterns (PSUBSCRIBE, PUBSUB CHANNELS).

/// Redis's glob matching (`stringmatchlen`): `*`, `?`, `[abc]`, `[^a]`,
/// `[a-z]`, and `\` escapes. Case-sensitive.
pub fn glob_match(pattern: &[u8], s: &[u8]) -> bool {
    // Every token but `*` matches exactly one byte, so on a mismatch it is
    // enough to let the last `*` absorb one more byte (earlier stars never
    // need to be revisited): O(pattern x string) however many stars there
    // are, where recursion per star was exponential (`*a*a*a*a*b` against a
    // long key froze the shard).
    let (mut pi, mut si) = (0, 0);
    // Pattern position just past the last `*`, and where its match ends.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pi < pattern.len() {
            if pattern[pi] == b'*' {
                while pi < pattern.len() && pattern[pi] == b'*' {
                    pi += 1;
                }
                if pi == pattern.len() {
                    return true;
                }
                star = Some((pi, si));
                continue;
            }
            if si < s.len() {
                if let Some(next) = glob_token(pattern, pi, s[si]) {
                    pi = next;
                    si += 1;
                    continue;
                }
            }
        } else if si == s.len() {
            return true;
        }
        match star {
            Some((sp, ss)) if ss < s.len() => {
                star = Some((sp, ss + 1));
                pi = sp;
                si = ss + 1;
            }
            _ => return false,
        }
    }
}

/// Matches one non-`*` token of `p` at `pi` against byte `c`; returns the
/// position of the next token when it matches.
fn glob_token(p: &[u8], mut pi: usize, c: u8) -> Option<usize> {
    let ok = match p[pi] {
        b'?' => true,
        b'[' => {
            pi += 1;
            let negate = pi < p.len() && p[pi] == b'^';
            if negate {
                pi += 1;
            }
            let mut matched = false;
            while pi < p.len() && p[pi] != b']' {
                if p[pi] == b'\\' && pi + 1 < p.len() {
                    pi += 1;
                    matched |= p[pi] == c;
                } else if pi + 2 < p.len() && p[pi + 1] == b'-' {
                    let (lo, hi) = if p[pi] <= p[pi + 2] {
                        (p[pi], p[pi + 2])
                    } else {
                        (p[pi + 2], p[pi])
                    };
                    matched |= (lo..=hi).contains(&c);
                    pi += 2;
                } else {
                    matched |= p[pi] == c;
                }
                pi += 1;
            }
            matched != negate
        }
        b'\\' if pi + 1 < p.len() => {
            pi += 1;
            p[pi] == c
        }
        t => t == c,
    };
    ok.then_some((pi + 1).min(p.len()))
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn glob_patterns() {
        assert!(glob_match(b"*", b"anything"));
        assert!(glob_match(b"h?llo", b"hello"));
        assert!(glob_match(b"h*llo", b"heeeello"));
        assert!(glob_match(b"h[ae]llo", b"hallo"));
        assert!(!glob_match(b"h[^e]llo", b"hello"));
        assert!(glob_match(b"h[a-b]llo", b"hbllo"));
        assert!(glob_match(b"a\\*b", b"a*b"));
        assert!(!glob_match(b"a\\*b", b"axb"));
        assert!(!glob_match(b"user:*", b"session:1"));
        assert!(glob_match(b"*:1", b"session:1"));
        assert!(glob_match(b"a*b*c", b"axxbyyc"));
        assert!(!glob_match(b"a*b*c", b"axxbyy"));
        assert!(glob_match(b"*[0-9]?", b"key12"));
        assert!(glob_match(b"**", b""));
        assert!(!glob_match(b"?", b""));
        assert!(!glob_match(b"a[", b"a["));
        assert!(glob_match(b"a\\", b"a\\"));
    }

    #[test]
    fn pathological_glob_is_fast() {
        let key = vec![b'a'; 20_000];
        let start = std::time::Instant::now();
        assert!(!glob_match(b"*a*a*a*a*a*a*a*a*a*a*a*a*b", &key));
        assert!(glob_match(b"*a*a*a*a*a*a*a*a*a*a*a*a*", &key));
        assert!(start.elapsed() < std::time::Duration::from_secs(2));
    }
}
