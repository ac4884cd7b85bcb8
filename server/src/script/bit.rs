//! The `bit` library Redis ships (LuaBitOp 1.0's operations): 32-bit
//! integer operations on Lua numbers, written here as Rust functions.
//!
//! A number is first normalised to a signed 32-bit integer as LuaBitOp
//! does (rounded to the nearest integer, ties to even, then taken modulo
//! 2^32), and results are signed 32-bit integers: `bit.lshift(1, 31)` is
//! `-2147483648`, `bit.tohex(-1)` is `ffffffff`.

use mlua::{Lua, Result, Table, Variadic};

/// LuaBitOp's normalisation: add 2^52 + 2^51 so the low 32 bits of the
/// double's representation hold the rounded integer modulo 2^32.
pub fn tobit(x: f64) -> i32 {
    (x + 6_755_399_441_055_744.0).to_bits() as u32 as i32
}

fn fold(args: Variadic<f64>, op: fn(i32, i32) -> i32) -> Result<i32> {
    let mut it = args.into_iter();
    let first = it
        .next()
        .ok_or_else(|| mlua::Error::runtime("bad argument #1 (number expected, got no value)"))?;
    Ok(it.fold(tobit(first), |acc, x| op(acc, tobit(x))))
}

/// `bit.tohex(x [, n])`: the low `n` (default 8, at most 8) hex digits of
/// `x`, upper case when `n` is negative.
pub fn tohex(x: f64, n: Option<f64>) -> String {
    let mut n = n.map(tobit).unwrap_or(8);
    let upper = n < 0;
    if upper {
        n = n.saturating_neg();
    }
    let n = n.clamp(0, 8) as usize;
    let digits: &[u8; 16] = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut y = tobit(x) as u32;
    let mut out = vec![b'0'; n];
    for slot in out.iter_mut().rev() {
        *slot = digits[(y & 15) as usize];
        y >>= 4;
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Registers the library as the table `bit` in `globals`.
pub fn register(lua: &Lua, globals: &Table) -> Result<()> {
    let bit = lua.create_table()?;
    bit.set("tobit", lua.create_function(|_, x: f64| Ok(tobit(x)))?)?;
    bit.set(
        "tohex",
        lua.create_function(|_, (x, n): (f64, Option<f64>)| Ok(tohex(x, n)))?,
    )?;
    bit.set("bnot", lua.create_function(|_, x: f64| Ok(!tobit(x)))?)?;
    bit.set(
        "band",
        lua.create_function(|_, a: Variadic<f64>| fold(a, |x, y| x & y))?,
    )?;
    bit.set(
        "bor",
        lua.create_function(|_, a: Variadic<f64>| fold(a, |x, y| x | y))?,
    )?;
    bit.set(
        "bxor",
        lua.create_function(|_, a: Variadic<f64>| fold(a, |x, y| x ^ y))?,
    )?;
    type Shift = fn(i32, u32) -> i32;
    let shifts: [(&str, Shift); 5] = [
        ("lshift", |x, n| ((x as u32) << n) as i32),
        ("rshift", |x, n| ((x as u32) >> n) as i32),
        ("arshift", |x, n| x >> n),
        ("rol", |x, n| (x as u32).rotate_left(n) as i32),
        ("ror", |x, n| (x as u32).rotate_right(n) as i32),
    ];
    for (name, op) in shifts {
        let f = lua
            .create_function(move |_, (x, n): (f64, f64)| Ok(op(tobit(x), tobit(n) as u32 & 31)))?;
        bit.set(name, f)?;
    }
    bit.set(
        "bswap",
        lua.create_function(|_, x: f64| Ok(tobit(x).swap_bytes()))?,
    )?;
    globals.set("bit", bit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_like_luabitop() {
        assert_eq!(tobit(4294967301.0), 5);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(2.5), 2);
        assert_eq!(tobit(3.5), 4);
        assert_eq!(tohex(-1.0, None), "ffffffff");
        assert_eq!(tohex(255.0, Some(-4.0)), "00FF");
        assert_eq!(tohex(255.0, Some(2.0)), "ff");
    }
}
