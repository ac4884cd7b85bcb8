//! Property tests: what we encode, an independent decoder (redis-protocol)
//! reads back unchanged; requests we encode, our decoder reads back unchanged,
//! whole or split at any byte; no input makes the decoder panic.

use bytes::{Bytes, BytesMut};
use leasehold_protocol::{decode_reply, decode_request, encode_request, Limits, Protocol, Reply};
use proptest::prelude::*;

fn reply_strategy() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        "[a-zA-Z0-9 ]{0,20}".prop_map(|s| Reply::Simple(s.into())),
        "[A-Z]{1,8} [a-z ]{0,20}".prop_map(|s| Reply::Error(s.into())),
        any::<i64>().prop_map(Reply::Int),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(|v| Reply::Bulk(Bytes::from(v))),
        Just(Reply::Nil),
        any::<bool>().prop_map(Reply::Bool),
        (-1e12f64..1e12).prop_map(Reply::Double),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Reply::Array),
            // Map keys are simple or bulk strings: that is all servers send, and
            // redis-protocol only accepts hashable keys.
            // Keys are unique because redis-protocol reads maps into a HashMap.
            proptest::collection::btree_map("[a-z]{1,8}", inner, 0..4).prop_map(|m| {
                Reply::Map(m.into_iter().map(|(k, v)| (Reply::bulk(k), v)).collect())
            }),
        ]
    })
}

/// What a reader sees of `r` over RESP2, which has no booleans, doubles or maps.
fn as_resp2(r: &Reply) -> Reply {
    match r {
        Reply::Bool(b) => Reply::Int(i64::from(*b)),
        Reply::Double(d) => Reply::Bulk(Bytes::from(leasehold_protocol::reply::format_double(*d))),
        Reply::Array(items) | Reply::Push(items) => {
            Reply::Array(items.iter().map(as_resp2).collect())
        }
        Reply::Map(pairs) => Reply::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [as_resp2(k), as_resp2(v)])
                .collect(),
        ),
        other => other.clone(),
    }
}

fn same(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        (Reply::Double(x), Reply::Double(y)) => (x - y).abs() <= x.abs() * 1e-15,
        (Reply::Array(x), Reply::Array(y)) | (Reply::Push(x), Reply::Push(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        // A HashMap on the reading side loses the order, not the pairs.
        (Reply::Map(x), Reply::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.iter().any(|(k2, v2)| k == k2 && same(v, v2)))
        }
        _ => a == b,
    }
}

/// Encodes `r` in both versions and checks that redis-protocol reads back
/// what a client of that version should see.
fn round_trip(r: &Reply) -> Result<(), TestCaseError> {
    for proto in [Protocol::Resp3, Protocol::Resp2] {
        let mut buf = BytesMut::from(&r.to_bytes(proto)[..]);
        let back = decode_reply(&mut buf).unwrap().unwrap();
        let expected = if proto == Protocol::Resp2 {
            as_resp2(r)
        } else {
            r.clone()
        };
        prop_assert!(
            same(&back, &expected),
            "{:?}: {:?} != {:?}",
            proto,
            back,
            expected
        );
        prop_assert!(buf.is_empty());
    }
    Ok(())
}

proptest! {
    #[test]
    fn replies_round_trip_through_redis_protocol(r in reply_strategy()) {
        round_trip(&r)?;
    }

    // A push only at the top: that is where servers send one.
    #[test]
    fn pushes_round_trip_through_redis_protocol(
        items in proptest::collection::vec(reply_strategy(), 0..5),
    ) {
        round_trip(&Reply::Push(items))?;
    }

    #[test]
    fn requests_round_trip_split_anywhere(
        args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut wire = BytesMut::new();
        encode_request(&args, &mut wire);
        let cut = cut.index(wire.len() + 1);
        let mut buf = BytesMut::from(&wire[..cut]);
        let limits = Limits::default();
        if cut < wire.len() {
            prop_assert_eq!(decode_request(&mut buf, &limits).unwrap(), None);
            prop_assert_eq!(buf.len(), cut);
            buf.extend_from_slice(&wire[cut..]);
        }
        let got = decode_request(&mut buf, &limits).unwrap().unwrap();
        let got: Vec<Vec<u8>> = got.iter().map(|b| b.to_vec()).collect();
        prop_assert_eq!(got, args);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let mut buf = BytesMut::from(&bytes[..]);
        let limits = Limits { max_bulk_len: 64, max_multibulk_len: 16, max_inline_len: 64, authenticated: true };
        while let Ok(Some(_)) = decode_request(&mut buf, &limits) {}
    }
}
