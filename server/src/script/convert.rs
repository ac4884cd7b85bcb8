//! Redis's conversions between replies and Lua values, both ways, as
//! Redis 7.0's `script_lua.c` defines them.
//!
//! A reply to `redis.call` becomes, under RESP2 (the default): an integer
//! a number, a bulk string a string, a null `false`, a status `{ok=...}`,
//! an error `{err=...}`, an array a table (nested). After
//! `redis.setresp(3)` a null is `nil`, and RESP3's types keep their
//! shape: a map `{map={k=v}}`, a set `{set={k=true}}`, a double
//! `{double=n}`, a boolean a boolean, a verbatim string
//! `{verbatim_string={format=..., string=...}}`. Under RESP2 those
//! RESP3 replies arrive in their RESP2 forms.
//!
//! A script's value becomes a reply: a number an integer (truncated
//! toward zero, as C's cast; out of range it is `i64::MIN`, what the cast
//! gives on x86-64), a string a bulk string, `nil` a null, `true` `:1` and
//! `false` a null (after `redis.setresp(3)`: RESP3 booleans), a table with
//! a string `err` an error, with a string `ok` a status, with a number
//! `double` a double, with a string `big_number` a bulk string, with a
//! table `map` a map, with a table `set` a set, any other table an array
//! that ends at its first `nil`.

use bytes::Bytes;
use leasehold_protocol::reply::format_double;
use leasehold_protocol::Reply;
use mlua::{Lua, Result, Table, Value};

/// How deep a returned table may nest before the reply is an error
/// (`ERR reached lua stack limit`, Redis's text where its stack check
/// stops; Redis goes deeper, about 2000 levels, but no reply needs more,
/// and a table that contains itself must stop somewhere on a thread's
/// stack).
const MAX_DEPTH: usize = 128;

/// A reply as the Lua value `redis.call` returns (`resp3`: after
/// `redis.setresp(3)`).
pub fn reply_to_lua(lua: &Lua, reply: &Reply, resp3: bool) -> Result<Value> {
    let single = |k: &str, v: Value| -> Result<Value> {
        let t = lua.create_table_with_capacity(0, 1)?;
        t.raw_set(k, v)?;
        Ok(Value::Table(t))
    };
    let str_value = |s: &[u8]| -> Result<Value> { Ok(Value::String(lua.create_string(s)?)) };
    let list = |items: &[Reply]| -> Result<Value> {
        let t = lua.create_table_with_capacity(items.len(), 0)?;
        for (i, r) in items.iter().enumerate() {
            t.raw_set(i + 1, reply_to_lua(lua, r, resp3)?)?;
        }
        Ok(Value::Table(t))
    };
    Ok(match reply {
        Reply::Int(i) => Value::Number(*i as f64),
        Reply::Bulk(b) => str_value(b)?,
        Reply::Nil | Reply::NilArray if resp3 => Value::Nil,
        Reply::Nil | Reply::NilArray => Value::Boolean(false),
        Reply::Simple(s) => single("ok", str_value(s.as_bytes())?)?,
        Reply::Error(e) => single("err", str_value(e.as_bytes())?)?,
        Reply::Array(items) | Reply::Push(items) | Reply::Several(items) => list(items)?,
        Reply::Map(pairs) if resp3 => {
            let t = lua.create_table_with_capacity(0, pairs.len())?;
            for (k, v) in pairs {
                let k = reply_to_lua(lua, k, resp3)?;
                if k != Value::Nil {
                    t.raw_set(k, reply_to_lua(lua, v, resp3)?)?;
                }
            }
            single("map", Value::Table(t))?
        }
        Reply::Map(pairs) => {
            let flat: Vec<Reply> = pairs
                .iter()
                .flat_map(|(k, v)| [k.clone(), v.clone()])
                .collect();
            list(&flat)?
        }
        Reply::Set(items) if resp3 => {
            let t = lua.create_table_with_capacity(0, items.len())?;
            for r in items {
                let k = reply_to_lua(lua, r, resp3)?;
                if k != Value::Nil {
                    t.raw_set(k, true)?;
                }
            }
            single("set", Value::Table(t))?
        }
        Reply::Set(items) => list(items)?,
        Reply::Double(d) if resp3 => single("double", Value::Number(*d))?,
        Reply::Double(d) => str_value(format_double(*d).as_bytes())?,
        Reply::Bool(b) if resp3 => Value::Boolean(*b),
        Reply::Bool(b) => Value::Number(i64::from(*b) as f64),
        Reply::Verbatim(format, body) if resp3 => {
            let t = lua.create_table_with_capacity(0, 2)?;
            t.raw_set("format", *format)?;
            t.raw_set("string", str_value(body)?)?;
            single("verbatim_string", Value::Table(t))?
        }
        Reply::Verbatim(_, body) => str_value(body)?,
        Reply::Bulks(_) | Reply::Pairs(_) => {
            let proto = match resp3 {
                true => leasehold_protocol::Protocol::Resp3,
                false => leasehold_protocol::Protocol::Resp2,
            };
            match reply.to_plain(proto) {
                Some(plain) => reply_to_lua(lua, &plain, resp3)?,
                None => Value::Nil,
            }
        }
    })
}

/// A Lua number as a reply's integer: C's `(long long)` cast on x86-64.
pub fn truncate(x: f64) -> i64 {
    if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&x) {
        x as i64
    } else {
        i64::MIN
    }
}

/// An error reply's text: CR and LF become spaces, as Redis's
/// `addReplyErrorFormat` makes them.
pub fn error_text(text: &[u8]) -> Reply {
    let s = String::from_utf8_lossy(text);
    Reply::err_owned(s.replace(['\r', '\n'], " "))
}

fn field(t: &Table, name: &str) -> Result<Value> {
    t.raw_get(name)
}

/// A script's returned value as its reply (`resp3`: after
/// `redis.setresp(3)`).
pub fn lua_to_reply(v: &Value, resp3: bool) -> Reply {
    lua_to_reply_at(v, resp3, 0).unwrap_or_else(|_| Reply::err("ERR reached lua stack limit"))
}

fn lua_to_reply_at(v: &Value, resp3: bool, depth: usize) -> Result<Reply> {
    if depth > MAX_DEPTH {
        return Err(mlua::Error::runtime("too deep"));
    }
    Ok(match v {
        Value::Nil => Reply::Nil,
        Value::Boolean(b) if resp3 => Reply::Bool(*b),
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Nil,
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(n) => Reply::Int(truncate(*n)),
        Value::String(s) => Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())),
        Value::Table(t) => table_to_reply(t, resp3, depth)?,
        _ => Reply::Nil,
    })
}

fn table_to_reply(t: &Table, resp3: bool, depth: usize) -> Result<Reply> {
    if let Value::String(e) = field(t, "err")? {
        return Ok(error_text(&e.as_bytes()));
    }
    if let Value::String(s) = field(t, "ok")? {
        let text = String::from_utf8_lossy(&s.as_bytes()).replace(['\r', '\n'], " ");
        return Ok(Reply::Simple(text.into()));
    }
    match field(t, "double")? {
        Value::Number(d) => return Ok(Reply::Double(d)),
        Value::Integer(i) => return Ok(Reply::Double(i as f64)),
        _ => {}
    }
    if let Value::String(s) = field(t, "big_number")? {
        return Ok(Reply::Bulk(Bytes::copy_from_slice(&s.as_bytes())));
    }
    if let Value::Table(m) = field(t, "map")? {
        let mut pairs = Vec::new();
        for pair in m.pairs::<Value, Value>() {
            let (k, v) = pair?;
            pairs.push((
                lua_to_reply_at(&k, resp3, depth + 1)?,
                lua_to_reply_at(&v, resp3, depth + 1)?,
            ));
        }
        return Ok(Reply::Map(pairs));
    }
    if let Value::Table(s) = field(t, "set")? {
        let mut items = Vec::new();
        for pair in s.pairs::<Value, Value>() {
            items.push(lua_to_reply_at(&pair?.0, resp3, depth + 1)?);
        }
        return Ok(Reply::Set(items));
    }
    let mut items = Vec::new();
    for i in 1.. {
        let v: Value = t.raw_get(i)?;
        if v == Value::Nil {
            break;
        }
        items.push(lua_to_reply_at(&v, resp3, depth + 1)?);
    }
    Ok(Reply::Array(items))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lua: &Lua, code: &str, resp3: bool) -> Reply {
        lua_to_reply(&lua.load(code).eval::<Value>().unwrap(), resp3)
    }

    #[test]
    fn numbers_truncate_false_is_null_and_arrays_stop_at_nil() {
        let lua = Lua::new();
        assert_eq!(
            run(&lua, "return {1, 2, 3.7, 'x', false, 'after'}", false),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Int(2),
                Reply::Int(3),
                Reply::bulk("x"),
                Reply::Nil,
                Reply::bulk("after")
            ])
        );
        assert_eq!(
            run(&lua, "return {1, nil, 3}", false),
            Reply::Array(vec![Reply::Int(1)])
        );
        assert_eq!(run(&lua, "return -3.99", false), Reply::Int(-3));
        assert_eq!(run(&lua, "return 1e30", false), Reply::Int(i64::MIN));
        assert_eq!(run(&lua, "return false", true), Reply::Bool(false));
        assert_eq!(run(&lua, "return {err='MY x'}", false), Reply::err("MY x"));
        assert_eq!(run(&lua, "return {ok=1}", false), Reply::Array(vec![]));
        let t = "local t = {} t[1] = t return t";
        assert!(run(&lua, t, false).is_error());
    }

    #[test]
    fn replies_become_lua_values() {
        let lua = Lua::new();
        let v = reply_to_lua(&lua, &Reply::Nil, false).unwrap();
        assert_eq!(v, Value::Boolean(false));
        let v = reply_to_lua(&lua, &Reply::Nil, true).unwrap();
        assert_eq!(v, Value::Nil);
        let v = reply_to_lua(&lua, &Reply::ok(), false).unwrap();
        assert_eq!(lua_to_reply(&v, false), Reply::ok());
    }
}
