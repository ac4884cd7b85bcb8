//! The `cmsgpack` library Redis ships (lua-cmsgpack 0.4's `pack`,
//! `unpack`, `unpack_one`, `unpack_limit`), over the `rmp` crate's
//! MessagePack primitives.
//!
//! Packing follows lua-cmsgpack's choices: a number equal to an `i64` is
//! the smallest integer encoding, another one a float32 when it converts
//! exactly and a float64 otherwise; a string is a `str`; a table whose
//! keys are exactly 1..n is an array, any other a map (in Lua's iteration
//! order); tables nested past 16 levels, functions and other values are
//! `nil`. Unpacking takes `bin` as strings and refuses `ext` ("Bad data
//! format in input.").

use mlua::{Lua, MultiValue, Result, Table, Value};
use rmp::decode::RmpRead;
use rmp::Marker;

/// lua-cmsgpack's `LUACMSGPACK_MAX_NESTING`.
const MAX_NESTING: usize = 16;

fn fail(what: &str) -> mlua::Error {
    mlua::Error::runtime(what)
}

fn number(x: f64, out: &mut Vec<u8>) {
    // As lua-cmsgpack's IS_INT64_EQUIVALENT.
    if x.is_finite()
        && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&x)
        && x as i64 as f64 == x
    {
        let _ = rmp::encode::write_sint(out, x as i64);
    } else if (x as f32) as f64 == x {
        // Not a NaN (never equal to itself): lua-cmsgpack writes it as a
        // double.
        let _ = rmp::encode::write_f32(out, x as f32);
    } else {
        let _ = rmp::encode::write_f64(out, x);
    }
}

/// Whether `t`'s keys are exactly 1..=n; returns n.
fn array_len(t: &Table) -> Result<Option<usize>> {
    let (mut max, mut count) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let n = match pair?.0 {
            Value::Integer(i) if i >= 1 => i as usize,
            Value::Number(n) if n >= 1.0 && n.fract() == 0.0 => n as usize,
            _ => return Ok(None),
        };
        max = max.max(n);
        count += 1;
    }
    Ok((max == count).then_some(max))
}

fn pack_value(v: &Value, nesting: usize, out: &mut Vec<u8>) -> Result<()> {
    match v {
        Value::String(s) => {
            let b = s.as_bytes();
            let _ = rmp::encode::write_str_len(out, b.len() as u32);
            out.extend_from_slice(&b);
        }
        Value::Boolean(b) => {
            let _ = rmp::encode::write_bool(out, *b);
        }
        Value::Integer(i) => number(*i as f64, out),
        Value::Number(n) => number(*n, out),
        Value::Table(t) if nesting < MAX_NESTING => match array_len(t)? {
            Some(len) => {
                let _ = rmp::encode::write_array_len(out, len as u32);
                for i in 1..=len {
                    pack_value(&t.raw_get::<Value>(i)?, nesting + 1, out)?;
                }
            }
            None => {
                let pairs: Vec<(Value, Value)> = t.pairs().collect::<Result<_>>()?;
                let _ = rmp::encode::write_map_len(out, pairs.len() as u32);
                for (k, v) in &pairs {
                    pack_value(k, nesting + 1, out)?;
                    pack_value(v, nesting + 1, out)?;
                }
            }
        },
        _ => {
            let _ = rmp::encode::write_nil(out);
        }
    }
    Ok(())
}

/// `cmsgpack.pack(...)`: every argument packed, one after another.
pub fn pack(args: &MultiValue) -> Result<Vec<u8>> {
    if args.is_empty() {
        return Err(fail("MessagePack pack needs input."));
    }
    let mut out = Vec::new();
    for v in args {
        pack_value(v, 0, &mut out)?;
    }
    Ok(out)
}

/// Why unpacking stopped.
fn missing() -> mlua::Error {
    fail("Missing bytes in input.")
}

fn bad() -> mlua::Error {
    fail("Bad data format in input.")
}

fn take<'a>(rd: &mut &'a [u8], n: usize) -> Result<&'a [u8]> {
    if rd.len() < n {
        return Err(missing());
    }
    let (head, rest) = rd.split_at(n);
    *rd = rest;
    Ok(head)
}

fn read<T>(r: std::result::Result<T, rmp::decode::ValueReadError>) -> Result<T> {
    r.map_err(|_| missing())
}

fn unpack_value(lua: &Lua, rd: &mut &[u8]) -> Result<Value> {
    let marker = rmp::decode::read_marker(rd).map_err(|_| missing())?;
    let len = |rd: &mut &[u8], m: Marker| -> Result<usize> {
        Ok(match m {
            Marker::FixStr(n) | Marker::FixArray(n) | Marker::FixMap(n) => n as usize,
            Marker::Str8 | Marker::Bin8 => read(rd.read_data_u8())? as usize,
            Marker::Str16 | Marker::Bin16 | Marker::Array16 | Marker::Map16 => {
                read(rd.read_data_u16())? as usize
            }
            _ => read(rd.read_data_u32())? as usize,
        })
    };
    Ok(match marker {
        Marker::Null => Value::Nil,
        Marker::True => Value::Boolean(true),
        Marker::False => Value::Boolean(false),
        Marker::FixPos(n) => Value::Number(n as f64),
        Marker::FixNeg(n) => Value::Number(n as f64),
        Marker::U8 => Value::Number(read(rd.read_data_u8())? as f64),
        Marker::U16 => Value::Number(read(rd.read_data_u16())? as f64),
        Marker::U32 => Value::Number(read(rd.read_data_u32())? as f64),
        Marker::U64 => Value::Number(read(rd.read_data_u64())? as f64),
        Marker::I8 => Value::Number(read(rd.read_data_i8())? as f64),
        Marker::I16 => Value::Number(read(rd.read_data_i16())? as f64),
        Marker::I32 => Value::Number(read(rd.read_data_i32())? as f64),
        Marker::I64 => Value::Number(read(rd.read_data_i64())? as f64),
        Marker::F32 => Value::Number(read(rd.read_data_f32())? as f64),
        Marker::F64 => Value::Number(read(rd.read_data_f64())?),
        m @ (Marker::FixStr(_)
        | Marker::Str8
        | Marker::Str16
        | Marker::Str32
        | Marker::Bin8
        | Marker::Bin16
        | Marker::Bin32) => {
            let n = len(rd, m)?;
            Value::String(lua.create_string(take(rd, n)?)?)
        }
        m @ (Marker::FixArray(_) | Marker::Array16 | Marker::Array32) => {
            let n = len(rd, m)?;
            let t = lua.create_table_with_capacity(n.min(1024), 0)?;
            for i in 1..=n {
                t.raw_set(i, unpack_value(lua, rd)?)?;
            }
            Value::Table(t)
        }
        m @ (Marker::FixMap(_) | Marker::Map16 | Marker::Map32) => {
            let n = len(rd, m)?;
            let t = lua.create_table_with_capacity(0, n.min(1024))?;
            for _ in 0..n {
                let k = unpack_value(lua, rd)?;
                let v = unpack_value(lua, rd)?;
                if k != Value::Nil {
                    t.raw_set(k, v)?;
                }
            }
            Value::Table(t)
        }
        _ => return Err(bad()),
    })
}

/// Unpacks up to `limit` objects (0: all) from byte `offset` of `data`.
/// With `with_offset`, the values are preceded by the offset of the next
/// object, or -1 when the input is used up (`unpack_one`, `unpack_limit`).
fn unpack_from(
    lua: &Lua,
    data: &[u8],
    limit: usize,
    offset: usize,
    with_offset: bool,
) -> Result<MultiValue> {
    if offset > data.len() {
        return Err(fail("Start offset greater than input length"));
    }
    let mut rd = &data[offset..];
    let mut values = Vec::new();
    while !rd.is_empty() && (limit == 0 || values.len() < limit) {
        values.push(unpack_value(lua, &mut rd)?);
    }
    if with_offset {
        let next = match rd.is_empty() {
            true => -1,
            false => (data.len() - rd.len()) as i64,
        };
        values.insert(0, Value::Integer(next as _));
    }
    Ok(MultiValue::from_iter(values))
}

/// Registers the library as the table `cmsgpack` in `globals`.
pub fn register(lua: &Lua, globals: &Table) -> Result<()> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|lua, args: MultiValue| lua.create_string(pack(&args)?))?,
    )?;
    t.set(
        "unpack",
        lua.create_function(|lua, s: mlua::String| unpack_from(lua, &s.as_bytes(), 0, 0, false))?,
    )?;
    t.set(
        "unpack_one",
        lua.create_function(|lua, (s, offset): (mlua::String, Option<usize>)| {
            unpack_from(lua, &s.as_bytes(), 1, offset.unwrap_or(0), true)
        })?,
    )?;
    t.set(
        "unpack_limit",
        lua.create_function(
            |lua, (s, limit, offset): (mlua::String, usize, Option<usize>)| {
                unpack_from(lua, &s.as_bytes(), limit, offset.unwrap_or(0), true)
            },
        )?,
    )?;
    globals.set("cmsgpack", t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_as_lua_cmsgpack() {
        let lua = Lua::new();
        let args: MultiValue = lua
            .load("return {a=1}, 'x', 1.5, -1, 300, true, nil")
            .eval()
            .unwrap();
        assert_eq!(
            pack(&args).unwrap(),
            b"\x81\xa1a\x01\xa1x\xca?\xc0\x00\x00\xff\xcd\x01,\xc3\xc0"
        );
        let arr: MultiValue = lua.load("return {1,2,3}").eval().unwrap();
        assert_eq!(pack(&arr).unwrap(), b"\x93\x01\x02\x03");
    }

    #[test]
    fn unpacks_what_it_packs_and_refuses_bad_input() {
        let lua = Lua::new();
        let args: MultiValue = lua.load("return 1, 'a', {1, 2}, 0.1").eval().unwrap();
        let packed = pack(&args).unwrap();
        let back = unpack_from(&lua, &packed, 0, 0, false).unwrap();
        assert_eq!(back.len(), 4);
        assert_eq!(back[3], Value::Number(0.1));
        let err = unpack_from(&lua, b"\xc1", 0, 0, false).unwrap_err();
        assert!(err.to_string().contains("Bad data format in input."));
        let err = unpack_from(&lua, b"\xcd\x01", 0, 0, false).unwrap_err();
        assert!(err.to_string().contains("Missing bytes in input."));
    }
}
