//! A Redis set: unordered distinct strings.
//!
//! Placeholder representation until the type's commands land: the store
//! and the effects already carry it (see [`super::Collection`]).

use super::Collection;

/// A Redis set: unordered distinct strings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Set {
    _private: (),
}

impl Collection for Set {
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
