//! Model-based tests of the collection types: each runs random operations
//! on the real structure and on a plain Rust model of it and compares every
//! observable after every step (proptest shrinks a failure to a short case).

mod hash;
mod list;
mod pack;
mod set;
mod zset;

use proptest::prelude::*;

/// Strings from a small alphabet (so that equal ones meet often) with
/// lengths on both sides of the varint's 128 bytes and of a node's limits.
fn element() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (0u8..4).prop_map(|c| vec![b'a' + c]),
        2 => (0u8..3, 120usize..140).prop_map(|(c, n)| vec![b'x' + c; n]),
        1 => (0u8..2, 1000usize..3000).prop_map(|(c, n)| vec![b'p' + c; n]),
        1 => Just(Vec::new()),
    ]
}
