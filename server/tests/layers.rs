//! The server's modules form one-way layers: a module may import only
//! modules in layers below its own, or in its own layer without a circle.
//! This test reads every `crate::<module>` path in `server/src` (comments
//! excluded) and fails on an import that goes up or closes a circle.
//!
//! The ladder, from the bottom (also drawn in `docs/ARCHITECTURE.md`):
//! `{clock, slot, cluster, error, config, glob, tls}` -> `{ratelimit, script}` -> `{state, store,
//! effects, pubsub}` -> `shard` -> `{commands, session}` -> `dispatch` -> `turn` ->
//! `net` -> `runtime` -> `harness`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each layer's top-level modules, from the bottom.
///
/// `replication` is a directory whose files sit on different rungs: each
/// `replication/<file>.rs` is placed as `replication::<file>` (its
/// `mod.rs` only declares them).
const LAYERS: &[&[&str]] = &[
    &[
        "clock",
        "slot",
        "cluster",
        "error",
        "config",
        "glob",
        "latency",
        "tls",
        "replication",
        "persist",
        "persist::format",
    ],
    &["ratelimit", "collections", "script", "acl"],
    &[
        "state",
        "store",
        "effects",
        "pubsub",
        "monitor",
        "replication::backlog",
        "replication::role",
        "replication::outbuf",
        "persist::status",
    ],
    &["shard"],
    &["commands", "session"],
    &["dispatch"],
    &["turn"],
    &[
        "net",
        "metrics",
        "replication::feed",
        "replication::link",
        "replication::snapshot",
        "persist::aof",
        "persist::load",
        "persist::daemon",
    ],
    &["runtime"],
    &["harness"],
];

/// Top-level modules whose files are placed one by one (see [`LAYERS`]).
const SPLIT: &[&str] = &["replication", "persist"];

/// `name`, or `name::<file>` when `name` is split and `rest` (the text
/// after `name`) names one of its files.
fn placed(name: String, rest: &str) -> String {
    if !SPLIT.contains(&name.as_str()) {
        return name;
    }
    let Some(after) = rest.strip_prefix("::") else {
        return name;
    };
    let file: String = after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    match file.is_empty() {
        true => name,
        false => format!("{name}::{file}"),
    }
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read server/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a source text names as `crate::<name>`, including
/// grouped imports `use crate::{a, b::c}`. Line comments (and so doc
/// comments) are skipped.
fn crate_refs(source: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let code: String = source
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let preceded_by_ident = rest[..i]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if !preceded_by_ident {
            if let Some(group) = after.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    let item = item.trim();
                    let name: String = item
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        let rest = &item[name.len()..];
                        refs.insert(placed(name, rest));
                    }
                }
            } else {
                let name: String = after
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    let rest = &after[name.len()..];
                    refs.insert(placed(name, rest));
                }
            }
        }
        rest = after;
    }
    refs
}

/// Which top-level modules each top-level module of `server/src` names.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src");
        let mut parts = rel.components().filter_map(|c| c.as_os_str().to_str());
        let mut top = parts
            .next()
            .expect("a path component")
            .trim_end_matches(".rs")
            .to_string();
        if SPLIT.contains(&top.as_str()) {
            if let Some(file) = parts.next().map(|f| f.trim_end_matches(".rs")) {
                if file != "mod" {
                    top = format!("{top}::{file}");
                }
            }
        }
        if top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        let refs = crate_refs(&text);
        let entry = graph.entry(top.clone()).or_default();
        entry.extend(refs.into_iter().filter(|r| *r != top));
    }
    graph
}

#[test]
fn every_module_has_a_layer() {
    let graph = module_graph();
    let missing: Vec<&String> = graph.keys().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        missing.is_empty(),
        "modules with no layer in LAYERS (add them, and to docs/ARCHITECTURE.md): {missing:?}"
    );
}

#[test]
fn no_module_imports_one_above_it() {
    let mut upward = Vec::new();
    for (module, refs) in module_graph() {
        let Some(own) = layer_of(&module) else {
            continue;
        };
        for r in refs {
            match layer_of(&r) {
                Some(l) if l > own => {
                    upward.push(format!("{module} (layer {own}) -> {r} (layer {l})"))
                }
                _ => {}
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports that go up a layer:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_import_circle() {
    let graph = module_graph();
    // Depth-first search with colours: grey = on the current path.
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        grey: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if done.contains(m) {
            return None;
        }
        if let Some(i) = grey.iter().position(|g| *g == m) {
            let mut circle: Vec<String> = grey[i..].iter().map(|s| s.to_string()).collect();
            circle.push(m.to_string());
            return Some(circle);
        }
        grey.push(m);
        for r in graph.get(m).into_iter().flatten() {
            if graph.contains_key(r) {
                if let Some(c) = visit(r, graph, grey, done) {
                    return Some(c);
                }
            }
        }
        grey.pop();
        done.insert(m);
        None
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        if let Some(circle) = visit(m, &graph, &mut Vec::new(), &mut done) {
            panic!("import circle: {}", circle.join(" -> "));
        }
    }
}

#[test]
fn the_reader_sees_grouped_and_nested_paths() {
    let refs = crate_refs(
        "use crate::{clock::Now, store};\n// crate::net in a comment\nlet x = crate::shard::Shard::new();\nmy_crate::dispatch::x();",
    );
    assert_eq!(
        refs.into_iter().collect::<Vec<_>>(),
        ["clock", "shard", "store"]
    );
    let split =
        crate_refs("use crate::replication::role::Ids;\nuse crate::{replication::backlog};");
    assert_eq!(
        split.into_iter().collect::<Vec<_>>(),
        ["replication::backlog", "replication::role"]
    );
}
