//! The `-ASK` / `-TRYAGAIN` answers of a slot in migration, decided on the
//! shard holding the command's keys when it runs (`Shard::run`), since only
//! that shard knows which keys are here. The command table lives a layer
//! up, so it hands its key positions down through [`KEY_POSITIONS`] (set
//! when the table is built); MIGRATE is in `commands/migrate.rs`.

use std::sync::OnceLock;

use bytes::Bytes;
use leasehold_protocol::Args;

use super::Shard;
use crate::cluster::Route;
use crate::error::OpError;
use crate::slot::key_slot;

/// Reads the key positions of a request (command index, arguments with
/// the name), as the command table does; none for a command that always
/// runs (MIGRATE).
pub type KeyPositions = fn(usize, &[Bytes]) -> Vec<usize>;

/// The command table's [`KeyPositions`], set when the table is built.
pub static KEY_POSITIONS: OnceLock<KeyPositions> = OnceLock::new();

/// What a command on a slot in migration gets instead of running, decided
/// on the shard holding its keys (Redis's `getNodeByQuery`): on a slot
/// migrating from here, `-MOVED` to the owner when the topology in force
/// (read after the states) no longer gives the slot to this node's group,
/// else `-ASK <slot> <host>:<port>` of the target when none of its keys is
/// here, `-TRYAGAIN` when some are and some are not; on a
/// slot imported here (reached after ASKING), `-TRYAGAIN` for a multi-key
/// command missing some of its keys. Called only while some slot is in
/// migration; MIGRATE itself always runs.
///
/// # Errors
/// [`OpError::Moved`], [`OpError::ClusterDown`] (no group owns the slot),
/// [`OpError::Ask`] or [`OpError::TryAgain`] as above.
pub fn check(s: &mut Shard, cmd: usize, args: &Args) -> Result<(), OpError> {
    let Some(keys) = KEY_POSITIONS.get() else {
        return Ok(());
    };
    let all = args.all();
    let positions = keys(cmd, all);
    let Some(&first) = positions.first() else {
        return Ok(());
    };
    let Some(cluster) = s.cluster().cloned() else {
        return Ok(());
    };
    let slot = key_slot(&all[first]);
    let moving = cluster.moving();
    let (to, importing) = match (
        moving.migrating.get(&slot),
        moving.importing.contains_key(&slot),
    ) {
        (Some(to), _) => (Some(to), false),
        (None, true) => (None, true),
        (None, false) => return Ok(()),
    };
    // The topology may have moved the slot away since the dispatcher
    // judged the request (it is read after the states, which a new
    // topology changes only after it is in force): MOVED to the owner.
    if to.is_some() {
        match cluster.load().route(slot, false) {
            Route::Here => {}
            Route::Moved(node) => {
                return Err(OpError::Moved {
                    slot,
                    addr: node.addr(),
                })
            }
            Route::Unassigned => return Err(OpError::ClusterDown),
        }
    }
    let now_ms = s.now.unix_ms;
    let (mut present, mut missing) = (0, 0);
    for p in positions {
        match s.store.get(&all[p], now_ms).is_some() {
            true => present += 1,
            false => missing += 1,
        }
    }
    match (to, importing) {
        (Some(_), _) if missing > 0 && present > 0 => Err(OpError::TryAgain),
        (Some(to), _) if missing > 0 => Err(OpError::Ask {
            slot,
            addr: to.addr(),
        }),
        (None, true) if missing > 0 && present + missing > 1 => Err(OpError::TryAgain),
        _ => Ok(()),
    }
}
