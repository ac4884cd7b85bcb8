//! The `cjson` library Redis ships (lua-cjson 2.1's `encode`, `decode` and
//! `null`), as Rust functions.
//!
//! Encoding is written here, byte for byte as lua-cjson's defaults
//! produce it: numbers with `%.14g`, `/` escaped as `\/`, a table whose
//! keys are all positive integers is an array (holes become `null`; more
//! than half holes past index 10 is "excessively sparse"), any other
//! table an object, an empty table `{}`, nesting at most 1000 deep.
//! Decoding parses with `serde_json` (JSON `null` is `cjson.null`, a
//! light userdata NULL, numbers are Lua numbers); its error messages are
//! serde_json's, not lua-cjson's, and it nests at most 128 deep.

use leasehold_protocol::reply::format_g;
use mlua::{LightUserData, Lua, Result, Table, Value};

/// lua-cjson's `encode_max_depth` default.
const MAX_DEPTH: usize = 1000;
/// lua-cjson's `encode_sparse_ratio` and `encode_sparse_safe` defaults.
const SPARSE_RATIO: i32 = 2;
const SPARSE_SAFE: i32 = 10;

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn fail(what: &str) -> mlua::Error {
    mlua::Error::runtime(what)
}

/// Appends `s` as a JSON string, escaped as lua-cjson escapes.
fn string(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            c if c < 0x20 || c == 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

fn number(x: f64, out: &mut Vec<u8>) -> Result<()> {
    if !x.is_finite() {
        return Err(fail("Cannot serialise number: must not be NaN or Inf"));
    }
    out.extend_from_slice(format_g(x, 14).as_bytes());
    Ok(())
}

/// A number key of an object: `"1e+300"`.
fn key_number(x: f64, out: &mut Vec<u8>) -> Result<()> {
    out.push(b'"');
    number(x, out)?;
    out.push(b'"');
    Ok(())
}

/// The array length of `t` as lua-cjson decides it: `Some(max index)`
/// when every key is a positive integer, `None` for an object.
///
/// lua-cjson keeps the largest key in a C `int`: a key of 2^31 or more
/// (infinity too) is stored as `INT_MIN`, and the table becomes an object
/// unless a later key (in `next` order) replaces it.
fn array_len(t: &Table) -> Result<Option<usize>> {
    let (mut max, mut items) = (0i32, 0i32);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) if i >= 1 => i as f64,
            Value::Number(n) if n >= 1.0 && n.floor() == n => n,
            _ => return Ok(None),
        };
        if n > f64::from(max) {
            // C's `(int)n` on x86-64.
            max = if n < 2_147_483_648.0 {
                n as i32
            } else {
                i32::MIN
            };
        }
        items = items.wrapping_add(1);
    }
    if max > items.wrapping_mul(SPARSE_RATIO) && max > SPARSE_SAFE {
        return Err(fail("Cannot serialise table: excessively sparse array"));
    }
    Ok(usize::try_from(max).ok())
}

fn value(v: &Value, depth: usize, out: &mut Vec<u8>) -> Result<()> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => number(*i as f64, out)?,
        Value::Number(n) => number(*n, out)?,
        Value::String(s) => string(&s.as_bytes(), out),
        Value::Table(t) => table(t, depth + 1, out)?,
        other => {
            return Err(fail(&format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    }
    Ok(())
}

fn table(t: &Table, depth: usize, out: &mut Vec<u8>) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(fail(&format!(
            "Cannot serialise, excessive nesting ({depth})"
        )));
    }
    match array_len(t)? {
        Some(len) if len > 0 => {
            out.push(b'[');
            for i in 1..=len {
                if i > 1 {
                    out.push(b',');
                }
                value(&t.raw_get::<Value>(i)?, depth, out)?;
            }
            out.push(b']');
        }
        _ => {
            out.push(b'{');
            let mut first = true;
            for pair in t.pairs::<Value, Value>() {
                let (k, v) = pair?;
                if !first {
                    out.push(b',');
                }
                first = false;
                match &k {
                    Value::String(s) => string(&s.as_bytes(), out),
                    // lua-cjson writes a number key with the number
                    // writer, which refuses infinity.
                    Value::Integer(i) => key_number(*i as f64, out)?,
                    Value::Number(n) => key_number(*n, out)?,
                    _ => {
                        return Err(fail(
                            "Cannot serialise table: table key must be a number or string",
                        ))
                    }
                }
                out.push(b':');
                value(&v, depth, out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// `cjson.encode(v)`.
pub fn encode(v: &Value) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    value(v, 0, &mut out)?;
    Ok(out)
}

fn to_lua(lua: &Lua, v: serde_json::Value) -> Result<Value> {
    Ok(match v {
        serde_json::Value::Null => null(),
        serde_json::Value::Bool(b) => Value::Boolean(b),
        serde_json::Value::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Value::String(lua.create_string(s)?),
        serde_json::Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        serde_json::Value::Object(map) => {
            let t = lua.create_table_with_capacity(0, map.len())?;
            for (k, item) in map {
                t.raw_set(k, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// `cjson.decode(text)`.
pub fn decode(lua: &Lua, text: &[u8]) -> Result<Value> {
    let parsed: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| fail(&format!("Expected JSON: {e}")))?;
    to_lua(lua, parsed)
}

/// Registers the library as the table `cjson` in `globals`.
pub fn register(lua: &Lua, globals: &Table) -> Result<()> {
    let cjson = lua.create_table()?;
    cjson.set(
        "encode",
        lua.create_function(|lua, v: mlua::MultiValue| {
            if v.len() != 1 {
                return Err(fail("bad argument #1 to 'encode' (expected 1 argument)"));
            }
            lua.create_string(encode(&v[0])?)
        })?,
    )?;
    cjson.set(
        "decode",
        lua.create_function(|lua, s: mlua::String| decode(lua, &s.as_bytes()))?,
    )?;
    cjson.set("null", null())?;
    globals.set("cjson", cjson)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(lua: &Lua, code: &str) -> String {
        let v: Value = lua.load(code).eval().unwrap();
        String::from_utf8(encode(&v).unwrap()).unwrap()
    }

    #[test]
    fn encodes_as_lua_cjson() {
        let lua = Lua::new();
        assert_eq!(enc(&lua, "return {1,2,'a',{b=1}}"), r#"[1,2,"a",{"b":1}]"#);
        assert_eq!(enc(&lua, "return {a='/x\"\\n'}"), r#"{"a":"\/x\"\n"}"#);
        assert_eq!(enc(&lua, "return {}"), "{}");
        assert_eq!(enc(&lua, "return 3.14159265358979"), "3.1415926535898");
        assert_eq!(enc(&lua, "return {[1]=1,[3]=3}"), "[1,null,3]");
        let sparse: Value = lua.load("return {[1]=1,[30]=3}").eval().unwrap();
        assert!(encode(&sparse)
            .unwrap_err()
            .to_string()
            .contains("excessively sparse array"));
    }

    #[test]
    fn decodes_null_as_the_null_light_userdata() {
        let lua = Lua::new();
        let v = decode(&lua, br#"[1.5,"x",{"a":null}]"#).unwrap();
        let Value::Table(t) = v else { panic!() };
        assert_eq!(t.raw_get::<f64>(1).unwrap(), 1.5);
        let inner: Table = t.raw_get(3).unwrap();
        assert_eq!(inner.raw_get::<Value>("a").unwrap(), null());
    }
}
