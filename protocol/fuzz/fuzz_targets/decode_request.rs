//! Feeds arbitrary bytes to the request decoder, whole and split in two, with
//! small limits so that limit paths are reached. The decoder must never panic,
//! must consume nothing when it answers "incomplete", and must decode the same
//! requests whether the bytes arrive at once or in two reads.
#![no_main]

use bytes::BytesMut;
use leasehold_protocol::{decode_request, Limits};
use libfuzzer_sys::fuzz_target;

fn drain(input: &[u8], split: usize, limits: &Limits) -> (Vec<Vec<bytes::Bytes>>, bool) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in [&input[..split], &input[split..]] {
        buf.extend_from_slice(chunk);
        loop {
            let before = buf.len();
            match decode_request(&mut buf, limits) {
                Ok(Some(args)) => out.push(args),
                Ok(None) => {
                    assert_eq!(buf.len(), before, "incomplete must consume nothing");
                    break;
                }
                Err(_) => return (out, true),
            }
        }
    }
    (out, false)
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let limits = Limits { max_bulk_len: 1 << 20, max_multibulk_len: 1024, max_inline_len: 4096, authenticated: data[0] & 1 == 0 };
    let input = &data[1..];
    let whole = drain(input, input.len(), &limits);
    let split = drain(input, input.len() / 2, &limits);
    assert_eq!(whole, split);
});
