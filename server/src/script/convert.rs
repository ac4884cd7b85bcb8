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
//!
//! Both conversions work on the Lua stack directly, not through mlua's
//! value handles (a handle per string and per table, and a string made per
//! field read, cost about a tenth of a short script's run). Each function
//! that takes a `state` requires (its `# Safety`): a live Lua state of this
//! thread, used from inside a protected call or a C function Lua called,
//! with room for two more values on its stack. The VM has no memory limit,
//! so pushing raises no Lua error (mlua assumes as much where it pushes
//! unprotected): these functions hold values that need dropping while they
//! push.

use std::ffi::c_int;

use bytes::Bytes;
use leasehold_protocol::reply::format_double;
use leasehold_protocol::Reply;
use mlua::ffi::{self, lua_State};

/// How deep a returned table may nest before the reply is an error
/// (`ERR reached lua stack limit`, Redis's text where its stack check
/// stops; Redis goes deeper, about 2000 levels, but no reply needs more,
/// and a table that contains itself must stop somewhere on a thread's
/// stack).
const MAX_DEPTH: usize = 128;

/// The reply of a script whose value nests deeper than [`MAX_DEPTH`], or
/// of a reply to `redis.call` that does not fit on the Lua stack.
pub const STACK_LIMIT: &str = "ERR reached lua stack limit";

/// Pushes `reply` as the Lua value `redis.call` returns (`resp3`: after
/// `redis.setresp(3)`). False, with nothing pushed, when it nests too deep
/// for the Lua stack.
///
/// # Safety
/// See the module's text.
pub unsafe fn push_reply(state: *mut lua_State, reply: &Reply, resp3: bool) -> bool {
    unsafe {
        // A table, a key and a value at each level.
        if ffi::lua_checkstack(state, 3) == 0 {
            return false;
        }
        match reply {
            Reply::Int(i) => ffi::lua_pushnumber(state, *i as f64),
            Reply::Bulk(b) => push_bytes(state, b),
            Reply::Nil | Reply::NilArray if resp3 => ffi::lua_pushnil(state),
            Reply::Nil | Reply::NilArray => ffi::lua_pushboolean(state, 0),
            Reply::Simple(s) => {
                push_bytes(state, s.as_bytes());
                single(state, c"ok");
            }
            Reply::Error(e) => {
                push_bytes(state, e.as_bytes());
                single(state, c"err");
            }
            Reply::Array(items) | Reply::Push(items) | Reply::Several(items) => {
                return push_list(state, items.iter(), items.len(), resp3);
            }
            Reply::Map(pairs) if resp3 => {
                ffi::lua_createtable(state, 0, table_size(pairs.len()));
                for (k, v) in pairs {
                    if !push_reply(state, k, resp3) {
                        ffi::lua_pop(state, 1);
                        return false;
                    }
                    if ffi::lua_type(state, -1) == ffi::LUA_TNIL {
                        ffi::lua_pop(state, 1);
                        continue;
                    }
                    if !push_reply(state, v, resp3) {
                        ffi::lua_pop(state, 2);
                        return false;
                    }
                    ffi::lua_rawset(state, -3);
                }
                single(state, c"map");
            }
            Reply::Map(pairs) => {
                let flat = pairs.iter().flat_map(|(k, v)| [k, v]);
                return push_list(state, flat, pairs.len() * 2, resp3);
            }
            Reply::Set(items) if resp3 => {
                ffi::lua_createtable(state, 0, table_size(items.len()));
                for r in items {
                    if !push_reply(state, r, resp3) {
                        ffi::lua_pop(state, 1);
                        return false;
                    }
                    if ffi::lua_type(state, -1) == ffi::LUA_TNIL {
                        ffi::lua_pop(state, 1);
                        continue;
                    }
                    ffi::lua_pushboolean(state, 1);
                    ffi::lua_rawset(state, -3);
                }
                single(state, c"set");
            }
            Reply::Set(items) => return push_list(state, items.iter(), items.len(), resp3),
            Reply::Double(d) if resp3 => {
                ffi::lua_pushnumber(state, *d);
                single(state, c"double");
            }
            Reply::Double(d) => push_bytes(state, format_double(*d).as_bytes()),
            Reply::Bool(b) if resp3 => ffi::lua_pushboolean(state, c_int::from(*b)),
            Reply::Bool(b) => ffi::lua_pushnumber(state, f64::from(u8::from(*b))),
            Reply::Verbatim(format, body) if resp3 => {
                ffi::lua_createtable(state, 0, 2);
                push_bytes(state, format.as_bytes());
                ffi::lua_setfield(state, -2, c"format".as_ptr());
                push_bytes(state, body);
                ffi::lua_setfield(state, -2, c"string".as_ptr());
                single(state, c"verbatim_string");
            }
            Reply::Verbatim(_, body) => push_bytes(state, body),
            Reply::Bulks(_) | Reply::Pairs(_) => {
                let proto = match resp3 {
                    true => leasehold_protocol::Protocol::Resp3,
                    false => leasehold_protocol::Protocol::Resp2,
                };
                match reply.to_plain(proto) {
                    Some(plain) => return push_reply(state, &plain, resp3),
                    None => ffi::lua_pushnil(state),
                }
            }
        }
        true
    }
}

/// A table's size hint for `n` entries (Lua takes a C int).
fn table_size(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

unsafe fn push_bytes(state: *mut lua_State, b: &[u8]) {
    unsafe {
        ffi::lua_pushlstring(state, b.as_ptr().cast(), b.len());
    }
}

/// Replaces the value on top with `{name = value}`.
unsafe fn single(state: *mut lua_State, name: &std::ffi::CStr) {
    unsafe {
        ffi::lua_createtable(state, 0, 1);
        ffi::lua_insert(state, -2);
        ffi::lua_setfield(state, -2, name.as_ptr());
    }
}

/// Pushes a sequence of `len` replies.
unsafe fn push_list<'a>(
    state: *mut lua_State,
    items: impl Iterator<Item = &'a Reply>,
    len: usize,
    resp3: bool,
) -> bool {
    unsafe {
        ffi::lua_createtable(state, table_size(len), 0);
        for (i, r) in items.enumerate() {
            if !push_reply(state, r, resp3) {
                ffi::lua_pop(state, 1);
                return false;
            }
            // Lua counts from 1.
            ffi::lua_rawseti(state, -2, (i + 1) as _);
        }
        true
    }
}

/// A Lua number as a reply's integer: C's `(long long)` cast on x86-64.
pub fn truncate(x: f64) -> i64 {
    if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&x) {
        x as i64
    } else {
        i64::MIN
    }
}

/// A non-negative Lua number as C's `(unsigned long long)` cast compiles
/// on x86-64: below 2^63 (and NaN) as `(long long)`, else 2^63 is taken off
/// first and its bit put back, so 2^64 and beyond (and infinity) are 0.
pub fn truncate_unsigned(x: f64) -> u64 {
    const TWO_63: f64 = 9.223_372_036_854_776e18;
    if x >= TWO_63 {
        truncate(x - TWO_63) as u64 ^ (1 << 63)
    } else {
        truncate(x) as u64
    }
}

/// An error reply's text: CR and LF become spaces, as Redis's
/// `addReplyErrorFormat` makes them.
pub fn error_text(text: &[u8]) -> Reply {
    let s = String::from_utf8_lossy(text);
    Reply::err_owned(s.replace(['\r', '\n'], " "))
}

/// The value at stack index `idx` (a script's returned value) as its
/// reply (`resp3`: after `redis.setresp(3)`).
///
/// # Safety
/// See the module's text.
pub unsafe fn lua_to_reply(state: *mut lua_State, idx: c_int, resp3: bool) -> Reply {
    unsafe {
        let idx = absolute(state, idx);
        reply_at(state, idx, resp3, 0).unwrap_or_else(|| Reply::err(STACK_LIMIT))
    }
}

unsafe fn absolute(state: *mut lua_State, idx: c_int) -> c_int {
    unsafe {
        match idx < 0 {
            true => ffi::lua_gettop(state) + idx + 1,
            false => idx,
        }
    }
}

/// The bytes of the string at `idx` (its type checked by the caller),
/// valid while it stays on the stack.
///
/// # Safety
/// See the module's text; the value at `idx` is a string.
pub unsafe fn bytes_at<'a>(state: *mut lua_State, idx: c_int) -> &'a [u8] {
    unsafe {
        let mut len = 0;
        let p = ffi::lua_tolstring(state, idx, &mut len);
        std::slice::from_raw_parts(p.cast(), len)
    }
}

/// `None`: nested deeper than [`MAX_DEPTH`].
unsafe fn reply_at(state: *mut lua_State, idx: c_int, resp3: bool, depth: usize) -> Option<Reply> {
    unsafe {
        if depth > MAX_DEPTH {
            return None;
        }
        Some(match ffi::lua_type(state, idx) {
            ffi::LUA_TBOOLEAN => {
                let b = ffi::lua_toboolean(state, idx) != 0;
                match (resp3, b) {
                    (true, b) => Reply::Bool(b),
                    (false, true) => Reply::Int(1),
                    (false, false) => Reply::Nil,
                }
            }
            ffi::LUA_TNUMBER => Reply::Int(truncate(ffi::lua_tonumber(state, idx))),
            ffi::LUA_TSTRING => Reply::Bulk(Bytes::copy_from_slice(bytes_at(state, idx))),
            ffi::LUA_TTABLE => table_to_reply(state, idx, resp3, depth)?,
            _ => Reply::Nil,
        })
    }
}

/// Pushes field `name` of the table at `idx` (a raw read) and answers its
/// type; the caller pops it.
unsafe fn field(state: *mut lua_State, idx: c_int, name: &str) -> c_int {
    unsafe {
        push_bytes(state, name.as_bytes());
        ffi::lua_rawget(state, idx)
    }
}

unsafe fn table_to_reply(
    state: *mut lua_State,
    idx: c_int,
    resp3: bool,
    depth: usize,
) -> Option<Reply> {
    unsafe {
        // The field, then a key and a value while walking a map.
        if ffi::lua_checkstack(state, 4) == 0 {
            return None;
        }
        let reply = match field(state, idx, "err") {
            ffi::LUA_TSTRING => Some(error_text(bytes_at(state, -1))),
            _ => None,
        };
        ffi::lua_pop(state, 1);
        if reply.is_some() {
            return reply;
        }
        if field(state, idx, "ok") == ffi::LUA_TSTRING {
            let text = String::from_utf8_lossy(bytes_at(state, -1)).replace(['\r', '\n'], " ");
            ffi::lua_pop(state, 1);
            return Some(Reply::Simple(text.into()));
        }
        ffi::lua_pop(state, 1);
        if field(state, idx, "double") == ffi::LUA_TNUMBER {
            let d = ffi::lua_tonumber(state, -1);
            ffi::lua_pop(state, 1);
            return Some(Reply::Double(d));
        }
        ffi::lua_pop(state, 1);
        if field(state, idx, "big_number") == ffi::LUA_TSTRING {
            let b = Bytes::copy_from_slice(bytes_at(state, -1));
            ffi::lua_pop(state, 1);
            return Some(Reply::Bulk(b));
        }
        ffi::lua_pop(state, 1);
        if field(state, idx, "map") == ffi::LUA_TTABLE {
            let m = ffi::lua_gettop(state);
            let mut pairs = Vec::new();
            ffi::lua_pushnil(state);
            while ffi::lua_next(state, m) != 0 {
                let k = reply_at(state, m + 1, resp3, depth + 1);
                let v = reply_at(state, m + 2, resp3, depth + 1);
                ffi::lua_pop(state, 1);
                match (k, v) {
                    (Some(k), Some(v)) => pairs.push((k, v)),
                    _ => {
                        ffi::lua_settop(state, m - 1);
                        return None;
                    }
                }
            }
            ffi::lua_pop(state, 1);
            return Some(Reply::Map(pairs));
        }
        ffi::lua_pop(state, 1);
        if field(state, idx, "set") == ffi::LUA_TTABLE {
            let m = ffi::lua_gettop(state);
            let mut items = Vec::new();
            ffi::lua_pushnil(state);
            while ffi::lua_next(state, m) != 0 {
                ffi::lua_pop(state, 1);
                match reply_at(state, m + 1, resp3, depth + 1) {
                    Some(k) => items.push(k),
                    None => {
                        ffi::lua_settop(state, m - 1);
                        return None;
                    }
                }
            }
            ffi::lua_pop(state, 1);
            return Some(Reply::Set(items));
        }
        ffi::lua_pop(state, 1);
        let mut items = Vec::new();
        for i in 1.. {
            let top = ffi::lua_gettop(state) + 1;
            if ffi::lua_rawgeti(state, idx, i) == ffi::LUA_TNIL {
                ffi::lua_pop(state, 1);
                break;
            }
            let item = reply_at(state, top, resp3, depth + 1);
            ffi::lua_pop(state, 1);
            items.push(item?);
        }
        Some(Reply::Array(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::{Lua, Value};

    #[test]
    fn unsigned_truncation_is_the_x86_64_cast() {
        assert_eq!(truncate_unsigned(3.9), 3);
        assert_eq!(
            truncate_unsigned(9.223_372_036_854_778e18),
            (1 << 63) | 2048
        );
        assert_eq!(truncate_unsigned(1.844_674_407_370_955_2e19), 0);
        assert_eq!(truncate_unsigned(f64::INFINITY), 0);
        assert_eq!(truncate_unsigned(f64::NAN), 1 << 63);
    }

    /// The reply of the value `code` returns.
    fn run(lua: &Lua, code: &str, resp3: bool) -> Reply {
        value_reply(lua, lua.load(code).eval().unwrap(), resp3)
    }

    /// The reply of Lua value `v`.
    fn value_reply(lua: &Lua, v: Value, resp3: bool) -> Reply {
        let mut reply = None;
        // SAFETY: the value is argument 1 of the protected call.
        let () = unsafe {
            lua.exec_raw(v, |state| {
                reply = Some(lua_to_reply(state, 1, resp3));
                ffi::lua_settop(state, 0);
            })
        }
        .unwrap();
        reply.unwrap()
    }

    /// `reply` as a Lua value.
    fn pushed(lua: &Lua, reply: &Reply, resp3: bool) -> Value {
        // SAFETY: pushes one value in a protected call.
        unsafe {
            lua.exec_raw((), |state| {
                assert!(push_reply(state, reply, resp3));
            })
        }
        .unwrap()
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
        assert_eq!(
            run(&lua, "return {ok='a\\r\\nb'}", false),
            Reply::Simple("a  b".into())
        );
        assert_eq!(run(&lua, "return {double=2}", true), Reply::Double(2.0));
        assert_eq!(
            run(&lua, "return {map={a={1}}}", true),
            Reply::Map(vec![(Reply::bulk("a"), Reply::Array(vec![Reply::Int(1)]))])
        );
        assert_eq!(
            run(&lua, "return {set={x=true}}", true),
            Reply::Set(vec![Reply::bulk("x")])
        );
        let t = "local t = {} t[1] = t return t";
        assert!(run(&lua, t, false).is_error());
    }

    #[test]
    fn replies_become_lua_values() {
        let lua = Lua::new();
        assert_eq!(pushed(&lua, &Reply::Nil, false), Value::Boolean(false));
        assert_eq!(pushed(&lua, &Reply::Nil, true), Value::Nil);
        assert_eq!(pushed(&lua, &Reply::Int(7), false), Value::Integer(7));
        let ok: Value = pushed(&lua, &Reply::ok(), false);
        let Value::Table(t) = &ok else {
            panic!("{ok:?}")
        };
        assert_eq!(t.raw_get::<String>("ok").unwrap(), "OK");
        let map = Reply::Map(vec![(Reply::bulk("k"), Reply::Int(1))]);
        let Value::Table(flat) = pushed(&lua, &map, false) else {
            panic!("a table")
        };
        assert_eq!(flat.raw_len(), 2);
        assert_eq!(flat.raw_get::<String>(1).unwrap(), "k");
        let Value::Table(m) = pushed(&lua, &map, true) else {
            panic!("a table")
        };
        let inner: mlua::Table = m.raw_get("map").unwrap();
        assert_eq!(inner.raw_get::<i64>("k").unwrap(), 1);
        // A value and back.
        assert_eq!(value_reply(&lua, ok, false), Reply::ok());
    }
}
