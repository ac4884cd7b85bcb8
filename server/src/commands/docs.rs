//! `COMMAND DOCS` argument trees, read from `docs/commands.md`.
//!
//! The syntax line at the top of each `## NAME` section of the command
//! reference (its first code span or code block) is the one source of truth:
//! it is parsed here into the argument shape Redis 7 returns (`name`, `type`,
//! `token`, `flags`, nested `arguments`), from which redis-cli builds its
//! interactive hints and the `HELP <command>` synopsis.
//!
//! Syntax: `UPPER` words are tokens, `key` is a key, other lower-case words
//! are values, `[...]` is optional, `<...>` groups a required part (Redis's
//! docs write `<BEFORE | AFTER>`), `a | b` chooses one, `...` repeats the
//! item before it. A value's type is `integer` when its name is one of
//! `INTEGER_ARGS`, `double` for the fractional ones of `DOUBLE_ARGS`
//! (Redis's types), `string` otherwise.

use std::collections::HashMap;
use std::sync::OnceLock;

use leasehold_protocol::Reply;

const REFERENCE: &str = include_str!("../../../docs/commands.md");

/// The syntax after the command name, per lower-case command name.
fn syntaxes() -> &'static HashMap<String, String> {
    static MAP: OnceLock<HashMap<String, String>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut map = HashMap::new();
        for section in REFERENCE.split("\n## ").skip(1) {
            let (name, body) = section.split_once('\n').unwrap_or((section, ""));
            let name = name.trim();
            if let Some(line) = first_code(body) {
                let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
                if let Some(rest) = strip_name(&line, name) {
                    map.insert(name.to_ascii_lowercase(), rest.to_string());
                }
            }
        }
        map
    })
}

/// The first fenced block's first line, or the first inline code span.
fn first_code(body: &str) -> Option<&str> {
    let body = body.trim_start();
    if let Some(rest) = body.strip_prefix("```") {
        let rest = rest.split_once('\n')?.1;
        return rest.split('\n').next();
    }
    let start = body.find('`')? + 1;
    let len = body[start..].find('`')?;
    Some(&body[start..start + len])
}

fn strip_name<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let head = line.get(..name.len())?;
    head.eq_ignore_ascii_case(name)
        .then(|| line[name.len()..].trim())
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Word(String),
    Block(Vec<Node>),
    OneOf(Vec<Node>),
    Optional(Box<Node>),
    Multiple(Box<Node>),
}

fn tokens(syntax: &str) -> Vec<String> {
    let spaced = syntax
        .replace('[', " [ ")
        .replace(']', " ] ")
        .replace('<', " < ")
        .replace('>', " > ")
        .replace('|', " | ")
        .replace("...", " ... ");
    spaced.split_whitespace().map(str::to_string).collect()
}

/// Parses items until `]`, `|` or the end.
fn parse_seq(t: &[String], pos: &mut usize) -> Option<Vec<Node>> {
    let mut items = Vec::new();
    while let Some(tok) = t.get(*pos) {
        match tok.as_str() {
            "]" | "|" | ">" => break,
            "<" => {
                *pos += 1;
                let inner = parse_alt(t, pos)?;
                if t.get(*pos).map(String::as_str) != Some(">") {
                    return None;
                }
                *pos += 1;
                items.push(inner);
            }
            "[" => {
                *pos += 1;
                let inner = parse_alt(t, pos)?;
                if t.get(*pos).map(String::as_str) != Some("]") {
                    return None;
                }
                *pos += 1;
                // `x [x ...]` is one argument that repeats, as Redis documents MGET.
                if let Node::Multiple(m) = &inner {
                    if items.last() == Some(&**m) {
                        items.pop();
                        items.push(inner);
                        continue;
                    }
                }
                items.push(Node::Optional(Box::new(inner)));
            }
            "..." => {
                *pos += 1;
                let last = items.pop()?;
                items.push(Node::Multiple(Box::new(last)));
            }
            word => {
                *pos += 1;
                items.push(Node::Word(word.to_string()));
            }
        }
    }
    Some(items)
}

fn parse_alt(t: &[String], pos: &mut usize) -> Option<Node> {
    let mut choices = vec![block(parse_seq(t, pos)?)];
    while t.get(*pos).map(String::as_str) == Some("|") {
        *pos += 1;
        choices.push(block(parse_seq(t, pos)?));
    }
    Some(if choices.len() == 1 {
        choices.pop()?
    } else {
        Node::OneOf(choices)
    })
}

fn block(mut items: Vec<Node>) -> Node {
    if items.len() == 1 {
        items.pop().expect("one item")
    } else {
        Node::Block(items)
    }
}

/// Value names that are integers wherever they appear in the reference (the
/// reference's numeric arguments, named as Redis names its own: `seconds`,
/// `milliseconds`, `increment`, `cursor`, ...).
const INTEGER_ARGS: &[&str] = &[
    // rate limits
    "capacity",
    "rate",
    "period_ms",
    "requested",
    "min",
    "count",
    "limit",
    "window_ms",
    "n",
    "max_burst",
    "count_per_period",
    "period_s",
    "quantity",
    "tokens_per_period",
    "period",
    "tokens",
    "fraction",
    "refilled_at_ms",
    "window_start_ms",
    "previous",
    "current",
    "empty_at_ms",
    "empty_at_fraction",
    "units_per_ms",
    "full_at_ms",
    "ms",
    // Redis commands
    "s",
    "seconds",
    "milliseconds",
    "unix_seconds",
    "unix_ms",
    "increment",
    "decrement",
    "cursor",
    "numkeys",
    "index",
    "protover",
    "offset",
    "start",
    "end",
    "db",
    "start",
    "stop",
    "rank",
    "num_matches",
    "len",
    // cluster
    "slot",
    "version",
];

/// Value names that are keys (LMOVE's `source` and `destination`, as Redis
/// names them).
const KEY_ARGS: &[&str] = &["key", "source", "destination"];

/// `(command, value)` pairs that are fractional numbers: GCRA's `period`
/// (seconds, microsecond accuracy), INCRBYFLOAT's and HINCRBYFLOAT's `increment`.
const DOUBLE_ARGS: &[(&str, &str)] = &[
    ("gcra", "period"),
    ("incrbyfloat", "increment"),
    ("hincrbyfloat", "increment"),
];

/// The COMMAND DOCS type of value `w` of command `cmd`.
fn value_type(cmd: &str, w: &str) -> &'static str {
    if DOUBLE_ARGS.contains(&(cmd, w)) {
        "double"
    } else if INTEGER_ARGS.contains(&w) {
        "integer"
    } else {
        "string"
    }
}

fn is_token(w: &str) -> bool {
    w.chars().any(|c| c.is_ascii_uppercase())
        && w.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || "-_.".contains(c))
}

fn entry(
    name: &str,
    kind: &str,
    token: Option<&str>,
    flags: &[&'static str],
    sub: Vec<Reply>,
) -> Reply {
    let mut m = vec![
        (Reply::bulk("name"), Reply::bulk(name)),
        (Reply::bulk("type"), Reply::bulk(kind)),
    ];
    if kind == "key" {
        m.push((Reply::bulk("key_spec_index"), Reply::Int(0)));
    }
    if let Some(t) = token {
        m.push((Reply::bulk("token"), Reply::bulk(t)));
    }
    if !flags.is_empty() {
        m.push((
            Reply::bulk("flags"),
            Reply::Set(flags.iter().map(|f| Reply::simple(f)).collect()),
        ));
    }
    if !sub.is_empty() {
        m.push((Reply::bulk("arguments"), Reply::Array(sub)));
    }
    Reply::Map(m)
}

fn render(cmd: &str, node: &Node, flags: &mut Vec<&'static str>) -> Reply {
    match node {
        Node::Optional(inner) => {
            flags.push("optional");
            render(cmd, inner, flags)
        }
        Node::Multiple(inner) => {
            flags.push("multiple");
            render(cmd, inner, flags)
        }
        Node::Word(w) if is_token(w) => entry(
            &w.to_ascii_lowercase(),
            "pure-token",
            Some(w),
            flags,
            Vec::new(),
        ),
        Node::Word(w) if KEY_ARGS.contains(&w.as_str()) => entry(w, "key", None, flags, Vec::new()),
        Node::Word(w) => entry(w, value_type(cmd, w), None, flags, Vec::new()),
        Node::Block(items) => match items.as_slice() {
            // `TOKEN value`: one argument introduced by its token, as Redis
            // writes `EX seconds`.
            [Node::Word(tok), Node::Word(val)] if is_token(tok) => {
                entry(val, value_type(cmd, val), Some(tok), flags, Vec::new())
            }
            _ => entry(
                "block",
                "block",
                None,
                flags,
                items
                    .iter()
                    .map(|n| render(cmd, n, &mut Vec::new()))
                    .collect(),
            ),
        },
        Node::OneOf(choices) => entry(
            "choice",
            "oneof",
            None,
            flags,
            choices
                .iter()
                .map(|n| render(cmd, n, &mut Vec::new()))
                .collect(),
        ),
    }
}

/// The `arguments` array of `COMMAND DOCS` for `name`, or `None` when the
/// reference has no parsable syntax line for it.
pub fn arguments(name: &str) -> Option<Reply> {
    let syntax = syntaxes().get(name)?;
    let t = tokens(syntax);
    let mut pos = 0;
    let items = parse_seq(&t, &mut pos)?;
    if pos != t.len() {
        return None;
    }
    Some(Reply::Array(
        items
            .iter()
            .map(|n| render(name, n, &mut Vec::new()))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_syntax_becomes_redis_shaped_arguments() {
        let t = tokens("key value [NX | XX] [GET] [EX s | PX ms]");
        let mut pos = 0;
        let items = parse_seq(&t, &mut pos).unwrap();
        assert_eq!(pos, t.len());
        assert_eq!(items.len(), 5);
        assert_eq!(items[0], Node::Word("key".into()));
        let Reply::Map(ex) = render("set", &items[4], &mut Vec::new()) else {
            panic!()
        };
        assert!(ex.contains(&(Reply::bulk("type"), Reply::bulk("oneof"))));
        assert!(ex.contains(&(
            Reply::bulk("flags"),
            Reply::Set(vec![Reply::simple("optional")])
        )));
    }

    /// The `type` of each top-level argument of `name`, with its name.
    fn types(name: &str) -> Vec<(String, String)> {
        let Some(Reply::Array(args)) = arguments(name) else {
            panic!("{name}: no arguments")
        };
        args.iter()
            .map(|a| {
                let Reply::Map(m) = a else { panic!() };
                let get = |k: &str| match m.iter().find(|(key, _)| *key == Reply::bulk(k)) {
                    Some((_, Reply::Bulk(v))) => String::from_utf8_lossy(v).into_owned(),
                    other => panic!("{k}: {other:?}"),
                };
                (get("name"), get("type"))
            })
            .collect()
    }

    #[test]
    fn a_required_choice_is_one_argument() {
        let t = types("linsert");
        let names: Vec<&str> = t.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["key", "choice", "pivot", "element"]);
        assert_eq!(t[1].1, "oneof");
        let lmove: Vec<String> = types("lmove").into_iter().map(|(_, k)| k).collect();
        assert_eq!(lmove, ["key", "key", "oneof", "oneof"]);
        assert_eq!(
            types("lpos")[2],
            ("rank".to_string(), "integer".to_string())
        );
    }

    #[test]
    fn numeric_arguments_have_redis_types() {
        let t = types("tokenlease");
        let kinds: Vec<&str> = t.iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(
            kinds,
            ["key", "integer", "integer", "integer", "integer", "integer"]
        );
        assert_eq!(t[5].0, "min");
        let gcra = types("gcra");
        assert_eq!(gcra[3], ("period".to_string(), "double".to_string()));
        assert_eq!(gcra[4], ("n".to_string(), "integer".to_string()));
        assert_eq!(types("cl.throttle")[4].1, "integer");
        assert_eq!(types("incrbyfloat")[1].1, "double");
        assert_eq!(types("incrby")[1].1, "integer");
        assert_eq!(types("set")[1].1, "string");
    }

    #[test]
    fn repeats_and_every_core_command_parses() {
        let t = tokens("key [key ...]");
        let mut pos = 0;
        let items = parse_seq(&t, &mut pos).unwrap();
        assert_eq!(
            items,
            vec![Node::Multiple(Box::new(Node::Word("key".into())))]
        );
        for name in [
            "get",
            "set",
            "mget",
            "mset",
            "del",
            "expire",
            "scan",
            "incrby",
            "tokenlease",
            "slidingwindow",
            "cl.throttle",
        ] {
            assert!(
                arguments(name).is_some(),
                "{name} has no parsable syntax line"
            );
        }
    }
}
