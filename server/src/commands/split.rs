//! How the work of a command over several shards divides and how the
//! parts' replies combine: the dispatcher's split of a multi-key request
//! and a script's `redis.call` on the shards it holds use the same rules.

use bytes::Bytes;
use leasehold_protocol::{int, Reply};

use super::{CommandSpec, Merge};
use crate::slot::{key_slot, slot_shard, SLOTS};

/// One shard's part of a multi-key request: the same command over that
/// shard's keys (and their companions, for MSET), in request order.
#[derive(Debug)]
pub struct ShardPart {
    /// The shard that runs it.
    pub shard: usize,
    /// The command name, then this shard's keys with their companions.
    pub argv: Vec<Bytes>,
    /// Each of those keys' ordinal among the request's keys (0-based),
    /// for [`Merge::Gather`].
    pub ordinals: Vec<usize>,
}

/// Whether every key of a multi-key request of `argc` arguments has its
/// companions (`MSET a 1 b` has not).
pub fn groups_complete(spec: &CommandSpec, argc: usize) -> bool {
    let step = spec.step.max(1) as usize;
    (argc - spec.first_key as usize) % step == 0
}

/// The shard of each key of request `all` (by key position), over
/// `shards` shards.
pub fn key_shards(spec: &CommandSpec, all: &[Bytes], shards: usize) -> Vec<usize> {
    spec.key_positions(all.len())
        .map(|p| slot_shard(key_slot(&all[p]), shards))
        .collect()
}

/// Request `all` of multi-key row `spec` split by the shard of its keys
/// (`owner`, from [`key_shards`]): one part per shard that has keys, in
/// shard order. The groups must be complete ([`groups_complete`]).
pub fn split_by_shard(
    spec: &CommandSpec,
    all: &[Bytes],
    owner: &[usize],
    shards: usize,
) -> Vec<ShardPart> {
    let step = spec.step.max(1) as usize;
    let mut per_shard: Vec<(Vec<Bytes>, Vec<usize>)> = vec![(Vec::new(), Vec::new()); shards];
    for (ordinal, (p, &s)) in spec.key_positions(all.len()).zip(owner).enumerate() {
        let (sub, ords) = &mut per_shard[s];
        if sub.is_empty() {
            sub.push(all[0].clone());
        }
        sub.extend_from_slice(&all[p..(p + step).min(all.len())]);
        ords.push(ordinal);
    }
    per_shard
        .into_iter()
        .enumerate()
        .filter(|(_, (argv, _))| !argv.is_empty())
        .map(|(shard, (argv, ordinals))| ShardPart {
            shard,
            argv,
            ordinals,
        })
        .collect()
}

/// The shard an [`super::Exec::Cursor`] row runs on: the one owning the
/// hash slot a SCAN cursor names (a cursor is a slot; one that does not
/// parse starts at slot 0), or the slot of CLUSTER COUNTKEYSINSLOT and
/// GETKEYSINSLOT (an argument that is not a slot: shard 0, whose handler
/// refuses it); `own` for CLUSTER's other subcommands; for MIGRATE the
/// shard of its first key (`commands::migrate::shard_of`).
pub fn cursor_shard(all: &[Bytes], shards: usize, own: usize) -> usize {
    if all[0].eq_ignore_ascii_case(b"migrate") {
        return super::migrate::shard_of(all, shards, own);
    }
    let at = match all[0].eq_ignore_ascii_case(b"scan") {
        true => 1,
        false => match all.get(1) {
            Some(sub)
                if sub.eq_ignore_ascii_case(b"countkeysinslot")
                    || sub.eq_ignore_ascii_case(b"getkeysinslot") =>
            {
                2
            }
            _ => return own,
        },
    };
    let slot = all
        .get(at)
        .and_then(|c| int::parse_u64(c))
        .unwrap_or(0)
        .min(SLOTS as u64 - 1);
    slot_shard(slot as u16, shards)
}

impl Merge {
    /// The reply of a command whose parts answered `replies` (in part
    /// order); `ordinals` are the parts' key ordinals and `nkeys` the
    /// request's key count ([`Merge::Gather`] needs them). The first error
    /// among the parts is the reply.
    pub fn combine(self, replies: Vec<Reply>, ordinals: &[Vec<usize>], nkeys: usize) -> Reply {
        if let Some(e) = replies.iter().find(|r| r.is_error()) {
            return e.clone();
        }
        match self {
            Merge::Sum => Reply::Int(
                replies
                    .iter()
                    .map(|r| if let Reply::Int(i) = r { *i } else { 0 })
                    .sum(),
            ),
            Merge::AllOk => replies.into_iter().next().unwrap_or_else(Reply::ok),
            Merge::Concat => Reply::Array(
                replies
                    .into_iter()
                    .flat_map(|r| {
                        if let Reply::Array(a) = r {
                            a
                        } else {
                            Vec::new()
                        }
                    })
                    .collect(),
            ),
            Merge::Any => {
                let mut found: Vec<Reply> =
                    replies.into_iter().filter(|r| *r != Reply::Nil).collect();
                if found.is_empty() {
                    return Reply::Nil;
                }
                use std::hash::BuildHasher;
                let draw = std::collections::hash_map::RandomState::new().hash_one(found.len());
                found.swap_remove(draw as usize % found.len())
            }
            Merge::Gather => {
                let mut out = vec![Reply::Nil; nkeys];
                for (r, ords) in replies.into_iter().zip(ordinals) {
                    if let Reply::Array(items) = r {
                        for (item, &o) in items.into_iter().zip(ords) {
                            out[o] = item;
                        }
                    }
                }
                Reply::Array(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::table;

    fn argv(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    #[test]
    fn mset_splits_with_its_values_in_order() {
        let (_, spec) = table().lookup(b"mset").unwrap();
        let all = argv(&["mset", "a", "1", "b", "2", "c", "3"]);
        let parts = split_by_shard(spec, &all, &[1, 0, 1], 2);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].shard, 0);
        assert_eq!(parts[0].argv, argv(&["mset", "b", "2"]));
        assert_eq!(parts[0].ordinals, vec![1]);
        assert_eq!(parts[1].shard, 1);
        assert_eq!(parts[1].argv, argv(&["mset", "a", "1", "c", "3"]));
        assert_eq!(parts[1].ordinals, vec![0, 2]);
    }

    #[test]
    fn gather_puts_values_back_at_their_keys() {
        let parts = vec![
            Reply::Array(vec![Reply::bulk("b")]),
            Reply::Array(vec![Reply::bulk("a"), Reply::bulk("c")]),
        ];
        let merged = Merge::Gather.combine(parts, &[vec![1], vec![0, 2]], 3);
        assert_eq!(
            merged,
            Reply::Array(vec![Reply::bulk("a"), Reply::bulk("b"), Reply::bulk("c")])
        );
    }

    #[test]
    fn sum_adds_and_the_first_error_wins() {
        assert_eq!(
            Merge::Sum.combine(vec![Reply::Int(2), Reply::Int(3)], &[], 0),
            Reply::Int(5)
        );
        let e = Reply::Error("ERR x".into());
        assert_eq!(
            Merge::Sum.combine(vec![Reply::Int(2), e.clone()], &[], 0),
            e
        );
    }

    #[test]
    fn a_cursor_names_the_shard_of_its_slot() {
        assert_eq!(cursor_shard(&argv(&["scan", "0"]), 2, 1), 0);
        assert_eq!(cursor_shard(&argv(&["scan", "16383"]), 2, 0), 1);
        assert_eq!(cursor_shard(&argv(&["scan", "junk"]), 2, 1), 0);
        assert_eq!(
            cursor_shard(&argv(&["cluster", "countkeysinslot", "16000"]), 2, 0),
            1
        );
        assert_eq!(cursor_shard(&argv(&["cluster", "info"]), 2, 1), 1);
    }
}
