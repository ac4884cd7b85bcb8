//! Splitting an inline request line into arguments with Redis's quoting rules
//! (`sdssplitargs` in Redis's `sds.c`).
//!
//! - Unquoted arguments end at whitespace.
//! - `"..."` understands `\n \r \t \b \a \\ \"` and `\xHH`.
//! - `'...'` understands only `\'`.
//! - A closing quote must be followed by whitespace or the end of the line.

/// Splits `line` (without its line ending) into arguments.
///
/// Returns `None` for unbalanced quotes or a closing quote followed by a
/// non-space byte; Redis answers both with "unbalanced quotes in request".
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        if i >= n {
            return Some(out);
        }
        let mut cur = Vec::new();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 3 < n && line[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex(line[i + 2]), hex(line[i + 3])) {
                        cur.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < n {
                    cur.push(match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    i += 2;
                    continue;
                }
                if c == b'"' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else if in_sq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    cur.push(b'\'');
                    i += 2;
                    continue;
                }
                if c == b'\'' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return None;
                    }
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else {
                if i >= n || is_space(line[i]) {
                    break;
                }
                match line[i] {
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    c => cur.push(c),
                }
                i += 1;
            }
        }
        out.push(cur);
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t' | 0x0b | 0x0c)
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::split_args;

    fn s(line: &str) -> Option<Vec<String>> {
        split_args(line.as_bytes()).map(|v| {
            v.into_iter()
                .map(|a| String::from_utf8(a).unwrap())
                .collect()
        })
    }

    #[test]
    fn quoting() {
        assert_eq!(
            s("set k v"),
            Some(vec!["set".into(), "k".into(), "v".into()])
        );
        assert_eq!(s("  a   b  "), Some(vec!["a".into(), "b".into()]));
        assert_eq!(
            s(r#"set "a b" 'c d'"#),
            Some(vec!["set".into(), "a b".into(), "c d".into()])
        );
        assert_eq!(s(r#""\x41\n""#), Some(vec!["A\n".into()]));
        assert_eq!(s(r#"'it\'s'"#), Some(vec!["it's".into()]));
        assert_eq!(s(r#""unterminated"#), None);
        assert_eq!(s(r#""a"b"#), None);
        assert_eq!(s(""), Some(vec![]));
    }
}
