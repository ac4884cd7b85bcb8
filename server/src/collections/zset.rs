//! A Redis sorted set: distinct members, each with a float score, ordered by (score, member).
//!
//! Placeholder representation until the type's commands land: the store
//! and the effects already carry it (see [`super::Collection`]).

use super::Collection;

/// A Redis sorted set: distinct members, each with a float score, ordered by (score, member).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZSet {
    _private: (),
}

impl Collection for ZSet {
    fn encoding(&self) -> &'static str {
        "listpack"
    }

    fn len(&self) -> usize {
        0
    }

    fn heap_bytes(&self) -> usize {
        0
    }

    fn rebuild(&self, _key: &[u8], _f: &mut dyn FnMut(&[&[u8]])) {}
}
