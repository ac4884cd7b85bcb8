//! The small-float format of the hot record's two counts (the renewal
//! watermark and the ledger's deficit): 20 bits, exact up to 32 767 tokens.

/// The two counts' format: `mantissa << exponent`, a 15-bit mantissa and a
/// 5-bit exponent, so exact up to 32 767 and within 1/32 768 above, up to
/// about 7 x 10^13.
pub(super) const SMALL_FLOAT: u32 = 20;
const MANTISSA: u32 = 15;
pub(super) const SMALL_FLOAT_MAX: u64 =
    ((1 << MANTISSA) - 1) << ((1 << (SMALL_FLOAT - MANTISSA)) - 1);

/// A [`SMALL_FLOAT`] back as the count it stands for.
pub(super) fn decode(f: u64) -> u64 {
    (f & ((1 << MANTISSA) - 1)) << (f >> MANTISSA)
}

/// `v` (saturated at [`SMALL_FLOAT_MAX`]) as a [`SMALL_FLOAT`], rounded up.
pub(super) fn encode_up(v: u64) -> u64 {
    let v = v.min(SMALL_FLOAT_MAX);
    let shift = (64 - v.leading_zeros()).saturating_sub(MANTISSA);
    let (mut m, mut e) = (v >> shift, u64::from(shift));
    if m << shift != v {
        m += 1;
        if m >> MANTISSA != 0 {
            (m, e) = (m >> 1, e + 1);
        }
    }
    (e << MANTISSA) | m
}
