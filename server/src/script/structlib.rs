//! The `struct` library Redis ships (Roberto Ierusalimschy's struct 0.2:
//! `pack`, `unpack`, `size`), as Rust functions.
//!
//! A format is read left to right: `<` little endian, `>` big endian, `=`
//! native, `!n` sets the largest alignment to n bytes (`!` alone: 8),
//! spaces are ignored; `x` one zero byte, `b`/`B` a signed/unsigned byte,
//! `h`/`H` 2 bytes, `l`/`L` and `T` 8 bytes, `i`/`I` (optionally `in`, n
//! from 1 to 8 here) 4 bytes, `f` a float, `d` a double, `s` a
//! zero-terminated string, `cn` n bytes (`c0`: the whole string to pack,
//! or, to unpack, the length given by the value before it). Alignment
//! starts at 1 (no padding), as in that library.

use leasehold_protocol::reply::format_g;
use mlua::{Lua, MultiValue, Result, Table, Value};

use super::convert::{truncate, truncate_unsigned};

fn fail(what: String) -> mlua::Error {
    mlua::Error::runtime(what)
}

/// One item of a format.
#[derive(Debug, Clone, Copy)]
enum Item {
    Pad,
    Int { size: usize, signed: bool },
    Float,
    Double,
    Zstr,
    Chars(usize),
}

struct Format<'a> {
    text: &'a [u8],
    pos: usize,
    little: bool,
    align: usize,
}

impl<'a> Format<'a> {
    fn new(text: &'a [u8]) -> Format<'a> {
        Format {
            text,
            pos: 0,
            little: cfg!(target_endian = "little"),
            align: 1,
        }
    }

    fn number(&mut self, default: usize) -> usize {
        let start = self.pos;
        while self.pos < self.text.len() && self.text[self.pos].is_ascii_digit() {
            self.pos += 1;
        }
        std::str::from_utf8(&self.text[start..self.pos])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    }

    /// The next item, or `None` at the end; options are applied on the way.
    fn next(&mut self) -> Result<Option<Item>> {
        while let Some(&c) = self.text.get(self.pos) {
            self.pos += 1;
            let int = |size, signed| Ok(Some(Item::Int { size, signed }));
            match c {
                b' ' => {}
                b'<' => self.little = true,
                b'>' => self.little = false,
                b'=' => self.little = cfg!(target_endian = "little"),
                b'!' => {
                    let a = self.number(8);
                    if !a.is_power_of_two() {
                        return Err(fail(format!("alignment {a} is not a power of 2")));
                    }
                    self.align = a;
                }
                b'x' => return Ok(Some(Item::Pad)),
                b'b' => return int(1, true),
                b'B' => return int(1, false),
                b'h' => return int(2, true),
                b'H' => return int(2, false),
                b'l' => return int(8, true),
                b'L' | b'T' => return int(8, false),
                b'i' | b'I' => {
                    let size = self.number(4);
                    if !(1..=8).contains(&size) {
                        return Err(fail(format!(
                            "integral size {size} is larger than limit of 8"
                        )));
                    }
                    return int(size, c == b'i');
                }
                b'f' => return Ok(Some(Item::Float)),
                b'd' => return Ok(Some(Item::Double)),
                b's' => return Ok(Some(Item::Zstr)),
                b'c' => return Ok(Some(Item::Chars(self.number(1)))),
                other => return Err(fail(format!("invalid format option '{}'", other as char))),
            }
        }
        Ok(None)
    }

    /// Padding before an item of `size` bytes at offset `len`.
    fn padding(&self, len: usize, item: Item) -> usize {
        let size = match item {
            Item::Int { size, .. } => size,
            Item::Float => 4,
            Item::Double => 8,
            _ => return 0,
        };
        if size <= 1 {
            return 0;
        }
        let align = size.min(self.align);
        (align - (len & (align - 1))) & (align - 1)
    }
}

fn put_int(out: &mut Vec<u8>, value: u64, size: usize, little: bool) {
    let bytes = value.to_le_bytes();
    let mut field = bytes[..size].to_vec();
    if !little {
        field.reverse();
    }
    out.extend_from_slice(&field);
}

fn arg_number(args: &[Value], i: usize) -> Result<f64> {
    match args.get(i) {
        Some(Value::Integer(n)) => Ok(*n as f64),
        Some(Value::Number(n)) => Ok(*n),
        Some(Value::String(s)) => s
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                fail(format!(
                    "bad argument #{} to 'pack' (number expected)",
                    i + 2
                ))
            }),
        _ => Err(fail(format!(
            "bad argument #{} to 'pack' (number expected)",
            i + 2
        ))),
    }
}

fn arg_bytes(args: &[Value], i: usize) -> Result<Vec<u8>> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        // Lua's `%.14g`: 2^53 is `9.007199254741e+15`.
        Some(Value::Integer(n)) => Ok(format_g(*n as f64, 14).into_bytes()),
        Some(Value::Number(n)) => Ok(format_g(*n, 14).into_bytes()),
        _ => Err(fail(format!(
            "bad argument #{} to 'pack' (string expected)",
            i + 2
        ))),
    }
}

/// `struct.pack(fmt, ...)`.
pub fn pack(fmt: &[u8], args: &[Value]) -> Result<Vec<u8>> {
    let mut f = Format::new(fmt);
    let mut out = Vec::new();
    let mut arg = 0;
    while let Some(item) = f.next()? {
        out.resize(out.len() + f.padding(out.len(), item), 0);
        match item {
            Item::Pad => out.push(0),
            Item::Int { size, .. } => {
                let n = arg_number(args, arg)?;
                // lua_struct's `(Uinttype)(Itype)n` or `(Uinttype)n`.
                let v = if n < 0.0 {
                    truncate(n) as u64
                } else {
                    truncate_unsigned(n)
                };
                put_int(&mut out, v, size, f.little);
                arg += 1;
            }
            Item::Float => {
                let v = (arg_number(args, arg)? as f32).to_bits() as u64;
                put_int(&mut out, v, 4, f.little);
                arg += 1;
            }
            Item::Double => {
                put_int(&mut out, arg_number(args, arg)?.to_bits(), 8, f.little);
                arg += 1;
            }
            Item::Zstr => {
                let s = arg_bytes(args, arg)?;
                out.extend_from_slice(&s);
                out.push(0);
                arg += 1;
            }
            Item::Chars(n) => {
                let s = arg_bytes(args, arg)?;
                let n = if n == 0 { s.len() } else { n };
                if s.len() < n {
                    return Err(fail(format!(
                        "bad argument #{} to 'pack' (string too short)",
                        arg + 2
                    )));
                }
                out.extend_from_slice(&s[..n]);
                arg += 1;
            }
        }
    }
    Ok(out)
}

fn get_int(data: &[u8], size: usize, little: bool, signed: bool) -> f64 {
    let mut bytes = [0u8; 8];
    bytes[..size].copy_from_slice(data);
    if !little {
        bytes[..size].reverse();
    }
    let raw = u64::from_le_bytes(bytes);
    if signed && size < 8 && raw & (1 << (size * 8 - 1)) != 0 {
        (raw | (u64::MAX << (size * 8))) as i64 as f64
    } else if signed {
        raw as i64 as f64
    } else {
        raw as f64
    }
}

/// `struct.unpack(fmt, data [, init])`: the values, then the 1-based
/// position after them.
pub fn unpack(lua: &Lua, fmt: &[u8], data: &[u8], init: usize) -> Result<MultiValue> {
    let mut f = Format::new(fmt);
    let mut pos = init.saturating_sub(1);
    let mut out: Vec<Value> = Vec::new();
    let short = || fail("bad argument #2 to 'unpack' (data string too short)".into());
    while let Some(item) = f.next()? {
        pos += f.padding(pos, item);
        let need = |n: usize| {
            if pos + n > data.len() {
                Err(short())
            } else {
                Ok(())
            }
        };
        match item {
            Item::Pad => {
                need(1)?;
                pos += 1;
            }
            Item::Int { size, signed } => {
                need(size)?;
                out.push(Value::Number(get_int(
                    &data[pos..pos + size],
                    size,
                    f.little,
                    signed,
                )));
                pos += size;
            }
            Item::Float => {
                need(4)?;
                let bits = get_int(&data[pos..pos + 4], 4, f.little, false) as u32;
                out.push(Value::Number(f32::from_bits(bits) as f64));
                pos += 4;
            }
            Item::Double => {
                need(8)?;
                let mut b = [0u8; 8];
                b.copy_from_slice(&data[pos..pos + 8]);
                let bits = if f.little {
                    u64::from_le_bytes(b)
                } else {
                    u64::from_be_bytes(b)
                };
                out.push(Value::Number(f64::from_bits(bits)));
                pos += 8;
            }
            Item::Zstr => {
                let rest = data.get(pos..).unwrap_or_default();
                let Some(end) = rest.iter().position(|&b| b == 0) else {
                    return Err(fail("unfinished string in data".into()));
                };
                out.push(Value::String(lua.create_string(&rest[..end])?));
                pos += end + 1;
            }
            Item::Chars(n) => {
                let n = match n {
                    0 => match out.pop() {
                        Some(Value::Number(x)) if x >= 0.0 => x as usize,
                        _ => return Err(fail("format 'c0' needs a previous size".into())),
                    },
                    n => n,
                };
                need(n)?;
                out.push(Value::String(lua.create_string(&data[pos..pos + n])?));
                pos += n;
            }
        }
    }
    out.push(Value::Number((pos + 1) as f64));
    Ok(MultiValue::from_iter(out))
}

/// `struct.size(fmt)`.
pub fn size(fmt: &[u8]) -> Result<usize> {
    let mut f = Format::new(fmt);
    let mut len = 0;
    while let Some(item) = f.next()? {
        len += f.padding(len, item);
        len += match item {
            Item::Pad => 1,
            Item::Int { size, .. } => size,
            Item::Float => 4,
            Item::Double => 8,
            Item::Chars(n) if n > 0 => n,
            _ => return Err(fail("options 'c0' and 's' have undefined sizes".into())),
        };
    }
    Ok(len)
}

/// Registers the library as the table `struct` in `globals`.
pub fn register(lua: &Lua, globals: &Table) -> Result<()> {
    let t = lua.create_table()?;
    t.set(
        "pack",
        lua.create_function(|lua, (fmt, args): (mlua::String, MultiValue)| {
            let args: Vec<Value> = args.into_iter().collect();
            lua.create_string(pack(&fmt.as_bytes(), &args)?)
        })?,
    )?;
    t.set(
        "unpack",
        lua.create_function(
            |lua, (fmt, data, init): (mlua::String, mlua::String, Option<usize>)| {
                unpack(lua, &fmt.as_bytes(), &data.as_bytes(), init.unwrap_or(1))
            },
        )?,
    )?;
    t.set(
        "size",
        lua.create_function(|_, fmt: mlua::String| size(&fmt.as_bytes()))?,
    )?;
    globals.set("struct", t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packs_like_the_struct_library() {
        let n = |x: f64| Value::Number(x);
        assert_eq!(pack(b">I2", &[n(258.0)]).unwrap(), b"\x01\x02");
        assert_eq!(
            pack(
                b"<bBhHlL",
                &[n(1.0), n(2.0), n(3.0), n(4.0), n(5.0), n(6.0)]
            )
            .unwrap()
            .len(),
            22
        );
        assert_eq!(
            pack(b"!4 b i", &[n(1.0), n(2.0)]).unwrap(),
            b"\x01\x00\x00\x00\x02\x00\x00\x00"
        );
        assert_eq!(size(b">I4d").unwrap(), 12);
        assert_eq!(pack(b"<i4", &[n(-2.0)]).unwrap(), b"\xfe\xff\xff\xff");
    }

    #[test]
    fn unpacks_what_it_packs() {
        let lua = Lua::new();
        let v = unpack(&lua, b"<i4", b"\xfe\xff\xff\xff", 1).unwrap();
        assert_eq!(v[0], Value::Number(-2.0));
        assert_eq!(v[1], Value::Number(5.0));
        let v = unpack(&lua, b"s", b"abc\0z", 1).unwrap();
        assert_eq!(
            v[0].as_string().map(|s| s.as_bytes().to_vec()),
            Some(b"abc".to_vec())
        );
        assert_eq!(v[1], Value::Number(5.0));
    }
}
