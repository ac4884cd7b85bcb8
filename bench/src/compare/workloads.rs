//! The rows of the comparison: what each server is sent.

use super::servers::Kind;

/// What one server is sent in a throughput row.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    /// Command template (see [`crate::template`]).
    pub command: &'static str,
    /// Lua script under `bench/lua/` to load first, if any.
    pub script: Option<&'static str>,
}

/// One throughput row: the same work on both servers.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Row label.
    pub name: &'static str,
    /// Pipeline depth.
    pub pipeline: usize,
    /// Key distribution, as `--distribution` takes it.
    pub distribution: &'static str,
    /// What Redis is sent.
    pub redis: Side,
    /// What Leasehold is sent.
    pub leasehold: Side,
}

impl Workload {
    /// The side for `kind`.
    pub fn side(&self, kind: Kind) -> &Side {
        match kind {
            Kind::Redis => &self.redis,
            Kind::Leasehold => &self.leasehold,
        }
    }
}

/// The same command on both servers.
const fn same(command: &'static str) -> (Side, Side) {
    (
        Side {
            command,
            script: None,
        },
        Side {
            command,
            script: None,
        },
    )
}

/// A native Leasehold command against a Lua script on Redis taking the same
/// arguments (`EVALSHA <sha> 1 <key> <args>`).
const fn native_vs_lua(
    native: &'static str,
    lua: &'static str,
    script: &'static str,
) -> (Side, Side) {
    (
        Side {
            command: lua,
            script: Some(script),
        },
        Side {
            command: native,
            script: None,
        },
    )
}

/// Token bucket: 100 tokens, refilled at 100 per second, 1 per call. With
/// 100k keys and about 10^5 calls/s each key sees about one call a second, so
/// nearly every call is granted and writes, the expensive path.
const TOKEN: (Side, Side) = native_vs_lua(
    "TOKENLEASE tb:__key__ 100 100 1000 1",
    "EVALSHA __sha__ 1 tb:__key__ 100 100 1000 1",
    "token_bucket.lua",
);
/// Sliding window: limit 100 per 60 s, the parameters the memory rows use
/// too.
const WINDOW: (Side, Side) = native_vs_lua(
    "SLIDINGWINDOW sw:__key__ 100 60000",
    "EVALSHA __sha__ 1 sw:__key__ 100 60000",
    "sliding_log.lua",
);
/// GCRA: burst 100 (max_burst 99), 100 per 60 s, 1 per call.
const GCRA: (Side, Side) = native_vs_lua(
    "CL.THROTTLE gc:__key__ 99 100 60 1",
    "EVALSHA __sha__ 1 gc:__key__ 99 100 60 1",
    "gcra.lua",
);

/// The scripts section's token bucket: 100 tokens, 10 per second, 1 per
/// call (ARGV of `bench/lua/token_bucket.lua`: capacity, rate, period_ms,
/// requested), the script on both servers and TOKENLEASE on Leasehold (on
/// keys of its own, `tb2:`, since the script's keys are hashes).
pub const SCRIPT_BUCKET: (Side, Side) = native_vs_lua(
    "TOKENLEASE tb2:__key__ 100 10 1000 1",
    "EVALSHA __sha__ 1 tb:__key__ 100 10 1000 1",
    "token_bucket.lua",
);

/// The rate-limit comparisons, by name, for the redis-benchmark cross-check.
pub const RATE_LIMITS: [(&str, (Side, Side)); 3] = [
    ("TOKENLEASE vs token-bucket Lua", TOKEN),
    ("SLIDINGWINDOW vs sorted-set Lua", WINDOW),
    ("CL.THROTTLE vs GCRA Lua", GCRA),
];

/// A row's name, sides, pipeline depths and key distribution.
type RowSpec = (&'static str, (Side, Side), &'static [usize], &'static str);

/// Every throughput row, in run order (SET before GET so GET finds values).
pub fn all() -> Vec<Workload> {
    let plain: [RowSpec; 4] = [
        ("PING", same("PING"), &[1, 16], "uniform"),
        ("SET", same("SET k:__key__ xxx"), &[1, 16], "uniform"),
        ("GET", same("GET k:__key__"), &[1, 16], "uniform"),
        ("INCR", same("INCR c:__key__"), &[1, 16], "uniform"),
    ];
    let rate_limits = RATE_LIMITS.map(|(name, sides)| (name, sides, &[1, 16][..], "uniform"));
    let zipf: RowSpec = (
        "TOKENLEASE vs token-bucket Lua, Zipf(0.99) keys",
        TOKEN,
        &[16],
        "zipf:0.99",
    );
    let rows: Vec<RowSpec> = plain.into_iter().chain(rate_limits).chain([zipf]).collect();
    rows.iter()
        .flat_map(|(name, (redis, leasehold), pipelines, distribution)| {
            pipelines.iter().map(move |&pipeline| Workload {
                name,
                pipeline,
                distribution,
                redis: redis.clone(),
                leasehold: leasehold.clone(),
            })
        })
        .collect()
}

/// One memory row: keys of one kind created with pipelined calls, each key
/// called `hits` times.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryRow {
    /// Row label.
    pub name: &'static str,
    /// Calls per key: 1 creates each key, more bring it to the state of a
    /// busy key (the fill visits the keys in turn `hits` times).
    pub hits: u64,
    /// What Redis is sent.
    pub redis: Side,
    /// What Leasehold is sent.
    pub leasehold: Side,
    /// A Redis command (a template) that reads how many hits a key holds
    /// without changing it; after the fill it must answer `hits` on the first
    /// and the last key, or the row fails (a hit was refused or left the window).
    pub redis_held: Option<&'static str>,
}

/// The sliding-window limit of [`WINDOW`]: the at-the-limit row hits each key
/// this many times.
pub const WINDOW_LIMIT: u64 = 100;

/// The memory rows. Parameters keep every key alive for the whole
/// measurement: buckets refill 1 token an hour (a key lives until full), the
/// window is 60 s and the GCRA emits 1 per hour.
///
/// The sliding window has two rows. With one hit a key's sorted set holds one
/// member; a key at its limit holds [`WINDOW_LIMIT`] members (one per hit
/// admitted in the window), which is the state of an actively limited key,
/// while Leasehold's state is the same size whatever the traffic.
pub fn memory_rows() -> Vec<MemoryRow> {
    let row = |name, hits, (redis, leasehold): (Side, Side)| MemoryRow {
        name,
        hits,
        redis,
        leasehold,
        redis_held: None,
    };
    vec![
        row(
            "token bucket (TOKENLEASE vs hash + Lua)",
            1,
            native_vs_lua(
                "TOKENLEASE tb:__key__ 100 1 3600000 1",
                "EVALSHA __sha__ 1 tb:__key__ 100 1 3600000 1",
                "token_bucket.lua",
            ),
        ),
        row(
            "sliding window (SLIDINGWINDOW vs sorted set + Lua), 1 hit per key",
            1,
            WINDOW,
        ),
        MemoryRow {
            redis_held: Some("ZCARD sw:__key__"),
            ..row(
                "sliding window (SLIDINGWINDOW vs sorted set + Lua), at the limit: 100 hits per key",
                WINDOW_LIMIT,
                WINDOW,
            )
        },
        row(
            "GCRA (CL.THROTTLE vs string + Lua)",
            1,
            native_vs_lua(
                "CL.THROTTLE gc:__key__ 99 1 3600 1",
                "EVALSHA __sha__ 1 gc:__key__ 99 1 3600 1",
                "gcra.lua",
            ),
        ),
        row("hash of 10 fields (HSET, a listpack on both)", 1, (HASH10, HASH10)),
    ]
}

/// The memory rows of the scripts and data types section: a sorted set of
/// [`ZSET_MEMBERS`] members and a hash of 10 fields, each key made by one
/// command, the same on both servers.
pub fn collection_memory_rows() -> Vec<MemoryRow> {
    let zset = Side {
        command: zset_command(),
        script: None,
    };
    let row = |name, side: Side| MemoryRow {
        name,
        hits: 1,
        redis: side.clone(),
        leasehold: side,
        redis_held: None,
    };
    vec![
        row(
            "sorted set of 100 members (one ZADD, a listpack on Redis)",
            zset,
        ),
        row("hash of 10 fields (one HSET, a listpack on Redis)", HASH10),
    ]
}

/// Members of the sorted-set memory row: under Redis's
/// `zset-max-listpack-entries` (128), so Redis keeps its compact encoding.
pub const ZSET_MEMBERS: usize = 100;

/// `ZADD zs:__key__ <score> m:00000 ... <score> m:00099`: a leaderboard of
/// [`ZSET_MEMBERS`] members with integer points between 1000 and 9999, in
/// no particular order.
pub fn zset_command() -> &'static str {
    static COMMAND: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let pairs: Vec<String> = (0..ZSET_MEMBERS)
            .map(|i| format!("{} m:{i:05}", 1000 + (i * 7919) % 9000))
            .collect();
        format!("ZADD zs:__key__ {}", pairs.join(" "))
    });
    &COMMAND
}

/// A hash of 10 short fields, one HSET: both servers keep it as a listpack.
const HASH10: Side = Side {
    command: "HSET hs:__key__ field:0 value:00000 field:1 value:00001 field:2 value:00002 field:3 value:00003 field:4 value:00004 field:5 value:00005 field:6 value:00006 field:7 value:00007 field:8 value:00008 field:9 value:00009",
    script: None,
};

/// The reclamation row's command: the same on both servers.
pub const RECLAIM_COMMAND: &str = "SET rc:__key__ xxx PX 1000";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::Template;

    #[test]
    fn rows_cover_every_workload_compared() {
        let rows = all();
        assert_eq!(rows.len(), 15);
        assert_eq!(rows.iter().filter(|w| w.pipeline == 16).count(), 8);
        assert!(rows.iter().any(
            |w| w.distribution == "zipf:0.99" && w.leasehold.command.starts_with("TOKENLEASE")
        ));
    }

    #[test]
    fn every_template_parses_and_scripts_exist() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
        let sides = all()
            .into_iter()
            .flat_map(|w| [w.redis, w.leasehold])
            .chain(
                memory_rows()
                    .into_iter()
                    .chain(collection_memory_rows())
                    .flat_map(|m| [m.redis, m.leasehold]),
            )
            .chain([SCRIPT_BUCKET.0, SCRIPT_BUCKET.1]);
        for side in sides {
            let t = Template::parse(side.command, Some("0123")).unwrap();
            assert!(t.has_key() || side.command == "PING", "{}", side.command);
            if let Some(s) = side.script {
                assert!(dir.join(s).is_file(), "missing bench/lua/{s}");
            }
        }
        assert!(Template::parse(RECLAIM_COMMAND, None).unwrap().has_key());
    }

    #[test]
    fn the_sorted_set_row_adds_100_distinct_members() {
        let args = Template::parse(zset_command(), None).unwrap().args(42);
        assert_eq!(args.len(), 2 + 2 * ZSET_MEMBERS);
        assert_eq!(&args[1][..], b"zs:000000000042");
        assert_eq!(
            (&args[2][..], &args[3][..]),
            (&b"1000"[..], &b"m:00000"[..])
        );
        assert_eq!(
            (&args[4][..], &args[5][..]),
            (&b"8919"[..], &b"m:00001"[..])
        );
        assert_eq!(&args[201][..], b"m:00099");
        let members: std::collections::HashSet<_> = args[3..].iter().step_by(2).collect();
        assert_eq!(members.len(), ZSET_MEMBERS);
        assert!(args[2..]
            .iter()
            .step_by(2)
            .all(|s| (1000..10_000).contains(&String::from_utf8_lossy(s).parse::<u32>().unwrap())));
    }

    #[test]
    fn at_the_limit_row_hits_each_key_up_to_the_limit() {
        let rows = memory_rows();
        let at_limit: Vec<&MemoryRow> = rows.iter().filter(|r| r.hits > 1).collect();
        assert_eq!(at_limit.len(), 1);
        let r = at_limit[0];
        // Every hit is admitted: hits equal the limit argument on both sides.
        for side in [&r.redis, &r.leasehold] {
            let args: Vec<&str> = side.command.split_whitespace().collect();
            let limit = &args[args.len() - 2];
            assert_eq!(limit.parse::<u64>().unwrap(), r.hits, "{}", side.command);
        }
        assert_eq!(r.hits, WINDOW_LIMIT);
        assert!(r.name.contains("100 hits per key"));
        // The read-back names the same key as the fill.
        let args = |cmd| Template::parse(cmd, Some("0123")).unwrap().args(7);
        assert_eq!(args(r.redis_held.unwrap())[1], args(r.redis.command)[3]);
        assert!(rows
            .iter()
            .any(|m| m.hits == 1 && m.redis.command == r.redis.command));
    }
}
