//! The configuration file: one or more YAML documents (separated by `---`
//! lines), each one domain in envoyproxy/ratelimit's shape with Leasehold's
//! extensions (`burst`, `failure_mode`, `mode`, `fail_open_requests_per_unit`;
//! see [`leasehold_client::policy`]). Every error names its line in the file.
//!
//! ```yaml
//! domain: edge
//! descriptors:
//!   - key: api_key
//!     rate_limit: { unit: second, requests_per_unit: 10 }
//! ---
//! domain: internal
//! descriptors:
//!   - key: generic_key
//!     value: batch
//!     rate_limit: { unit: minute, requests_per_unit: 600 }
//!     failure_mode: fail_closed
//! ```

use std::fmt;

use leasehold_client::PolicySet;

/// A configuration file that was refused: the line (1-based, in the whole
/// file) when one is known, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigError {
    /// The line the error is on, 1-based; `None` when no line applies (an
    /// unreadable file).
    pub line: Option<usize>,
    /// What is wrong, naming the place in the document
    /// (`descriptors[1].rate_limit.unit: unknown unit "fortnight"`).
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Parses a whole configuration file into one [`PolicySet`] per domain, in
/// file order. Documents holding only comments or blanks are skipped.
///
/// # Errors
/// The first [`ConfigError`]: YAML syntax, unknown fields, values the
/// policy loader refuses, a domain declared twice, a file with no domain.
pub fn parse(text: &str) -> Result<Vec<PolicySet>, ConfigError> {
    let mut sets: Vec<PolicySet> = Vec::new();
    for (first_line, doc) in documents(text) {
        let blank = doc
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'));
        if blank {
            continue;
        }
        let set = PolicySet::from_yaml(doc).map_err(|e| {
            let (line, message) = if e.path.is_empty() {
                syntax_line(&e.message)
            } else {
                (locate(doc, &e.path), e.to_string())
            };
            ConfigError {
                line: Some(line.map_or(first_line, |l| l + first_line - 1)),
                message,
            }
        })?;
        if sets.iter().any(|s| s.domain == set.domain) {
            return Err(ConfigError {
                line: Some(locate(doc, "domain").map_or(first_line, |l| l + first_line - 1)),
                message: format!("domain {:?} is declared twice", set.domain),
            });
        }
        sets.push(set);
    }
    if sets.is_empty() {
        return Err(ConfigError {
            line: None,
            message: "no domain: the file holds no YAML document with a `domain`".into(),
        });
    }
    Ok(sets)
}

/// The file's documents with the 1-based line each starts on.
fn documents(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let (mut start, mut start_line, mut offset) = (0, 1, 0);
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_end() == "---" {
            out.push((start_line, &text[start..offset]));
            start = offset + line.len();
            start_line = i + 2;
        }
        offset += line.len();
    }
    out.push((start_line, &text[start..]));
    out
}

/// The YAML parser's own line (`... at line 4 column 7`), removed from the
/// message (the caller puts the file's line in front instead).
fn syntax_line(message: &str) -> (Option<usize>, String) {
    let Some(at) = message.rfind(" at line ") else {
        return (None, message.to_owned());
    };
    let digits: String = message[at + 9..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let rest = &message[at + 9 + digits.len()..];
    let tail = rest
        .strip_prefix(" column ")
        .map_or(rest, |r| r.trim_start_matches(|c: char| c.is_ascii_digit()));
    (digits.parse().ok(), format!("{}{tail}", &message[..at]))
}

/// One line of a document: its text and the column its content starts at,
/// past indentation and list dashes (`  - key: a` has its content at 4 and
/// a dash at 2).
struct Line<'a> {
    text: &'a str,
    content_col: usize,
    dash_col: Option<usize>,
}

fn lines(doc: &str) -> Vec<Line<'_>> {
    doc.lines()
        .map(|text| {
            let bytes = text.as_bytes();
            let mut col = 0;
            let mut dash_col = None;
            loop {
                while bytes.get(col) == Some(&b' ') {
                    col += 1;
                }
                if bytes.get(col) == Some(&b'-') && matches!(bytes.get(col + 1), Some(b' ') | None)
                {
                    dash_col.get_or_insert(col);
                    col += 1;
                    continue;
                }
                break;
            }
            Line {
                text,
                content_col: col,
                dash_col,
            }
        })
        .collect()
}

fn is_blank(l: &Line<'_>) -> bool {
    let c = &l.text[l.content_col.min(l.text.len())..];
    c.trim().is_empty() || c.starts_with('#')
}

/// The 1-based line in `doc` of the value at a policy error's `path`
/// (`descriptors[1].rate_limit.unit`), found by indentation: block mappings
/// and sequences, and a flow mapping on one line (`{unit: x}`). `None` when
/// the document's layout defeats it; then the caller names the document's
/// first line.
fn locate(doc: &str, path: &str) -> Option<usize> {
    let ls = lines(doc);
    // The scope: lines [from, to) holding one mapping; `at` is the line
    // found so far.
    let (mut from, mut to, mut at) = (0, ls.len(), None);
    for segment in path.split('.') {
        let (key, indexes) = match segment.find('[') {
            Some(b) => (&segment[..b], &segment[b..]),
            None => (segment, ""),
        };
        let col = (from..to)
            .filter(|&i| !is_blank(&ls[i]))
            .map(|i| ls[i].content_col)
            .min();
        let found = col.and_then(|col| {
            (from..to).find(|&i| {
                ls[i].content_col == col && ls[i].text[col..].starts_with(&format!("{key}:"))
            })
        });
        let Some(k) = found else {
            // Not a line of its own: a flow mapping on the line found last
            // (`rate_limit: {unit: x}`), which is then the line to name.
            return at.map(|a| a + 1);
        };
        at = Some(k);
        let key_col = ls[k].content_col;
        from = k + 1;
        to = (from..ls.len())
            .find(|&i| !is_blank(&ls[i]) && ls[i].dash_col.unwrap_or(ls[i].content_col) <= key_col)
            .unwrap_or(ls.len());
        for index in indexes
            .split(['[', ']'])
            .filter(|s| !s.is_empty())
            .filter_map(|s| s.parse::<usize>().ok())
        {
            let dash = (from..to).filter_map(|i| ls[i].dash_col).min()?;
            let items: Vec<usize> = (from..to)
                .filter(|&i| ls[i].dash_col == Some(dash))
                .collect();
            let item = *items.get(index)?;
            at = Some(item);
            from = item;
            to = (item + 1..to)
                .find(|&i| !is_blank(&ls[i]) && ls[i].dash_col.unwrap_or(ls[i].content_col) <= dash)
                .unwrap_or(to);
        }
    }
    at.map(|a| a + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "\
# two domains
domain: edge
descriptors:
  - key: api_key
    rate_limit: { unit: second, requests_per_unit: 10 }
---
domain: internal
descriptors:
  - key: generic_key
    value: batch
    rate_limit:
      unit: minute
      requests_per_unit: 600
";

    #[test]
    fn loads_every_domain_of_the_file() {
        let sets = parse(TWO).unwrap();
        let names: Vec<&str> = sets.iter().map(|s| s.domain.as_str()).collect();
        assert_eq!(names, ["edge", "internal"]);
        let p = sets[1].get(sets[1].find(&[("generic_key", "batch")]).unwrap());
        assert_eq!((p.requests_per_unit, p.burst), (600, 600));
    }

    #[test]
    fn a_bad_value_is_refused_with_its_line_in_the_file() {
        let bad = TWO.replace("unit: minute", "unit: fortnight");
        let e = parse(&bad).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"line 12: descriptors[0].rate_limit.unit: unknown unit "fortnight""#
        );
        let flow = TWO.replace("unit: second", "unit: fortnight");
        assert_eq!(parse(&flow).unwrap_err().line, Some(5));
        let nested = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: b\n    descriptors:\n      - key: c\n        rate_limit: {unit: second, requests_per_unit: 0}\n";
        let e = parse(nested).unwrap_err();
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e
            .message
            .starts_with("descriptors[1].descriptors[0].rate_limit.requests_per_unit"));
    }

    #[test]
    fn a_bad_algorithm_is_refused_with_its_line() {
        let bad = TWO.replace(
            "    value: batch\n",
            "    value: batch\n    algorithm: leaky_bucket\n",
        );
        assert_eq!(
            parse(&bad).unwrap_err().to_string(),
            r#"line 11: descriptors[0].algorithm: unknown algorithm "leaky_bucket" (token_bucket, sliding_window, gcra)"#
        );
        let ok = TWO.replace(
            "    value: batch\n",
            "    value: batch\n    algorithm: gcra\n",
        );
        let set = &parse(&ok).unwrap()[1];
        let id = set.find(&[("generic_key", "batch")]).unwrap();
        assert_eq!(set.algorithm(id), leasehold_client::policy::Algorithm::Gcra);
    }

    #[test]
    fn syntax_errors_and_unknown_fields_name_the_files_line() {
        let e = parse(&TWO.replace("    value: batch", "    valu: batch")).unwrap_err();
        assert_eq!(e.line, Some(10), "{e}");
        assert!(e.message.contains("unknown field `valu`"), "{e}");
        let e = parse("domain: a\ndescriptors:\n  - key: [unclosed\n").unwrap_err();
        assert!(e.line.is_some(), "{e}");
        assert!(!e.message.contains(" at line "), "{e}");
    }

    #[test]
    fn the_example_file_loads() {
        let sets = parse(include_str!("../limits.example.yaml")).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].policies().len(), 5);
        let login = sets[0].find(&[("login_ip", "10.0.0.1")]).unwrap();
        assert_eq!(
            sets[0].algorithm(login),
            leasehold_client::policy::Algorithm::SlidingWindow
        );
        assert_eq!(
            sets[0].find(&[("partner_key", "p"), ("plan", "internal")]),
            None
        );
    }

    #[test]
    fn a_domain_twice_or_no_domain_is_refused() {
        let twice = format!("{TWO}---\ndomain: edge\n");
        assert_eq!(
            parse(&twice).unwrap_err().to_string(),
            r#"line 15: domain "edge" is declared twice"#
        );
        assert_eq!(parse("# nothing\n").unwrap_err().line, None);
    }
}
