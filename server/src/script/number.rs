//! `tonumber`, as Lua 5.1's base library defines it, with a faster path
//! for the strings rate-limit scripts convert most: plain decimals such
//! as `100`, `-2.5` or `1e3` (their arguments and the replies of
//! `HMGET`/`GET`).
//!
//! Lua converts a string with the C library's `strtod`, and its
//! `tonumber` converts twice (it tests, then converts); together that was
//! about 4% of a short script's run. A plain decimal is parsed here once
//! with Rust's parser, which, like `strtod`, rounds correctly, so both
//! give the same double; every other string (surrounding spaces,
//! hexadecimal, `inf`, `nan`, an embedded NUL) and every other base goes
//! to Lua's own conversion.

use std::ffi::c_int;

use mlua::ffi::{self, lua_State};

/// The double a plain decimal string stands for: an optional sign, digits
/// with at most one `.` (at least one digit in all), then optionally `e`
/// or `E`, an optional sign and digits; nothing else. `None` for any
/// other string (which may still be a number to Lua).
pub fn plain_decimal(s: &[u8]) -> Option<f64> {
    let mut i = usize::from(matches!(s.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while s.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    let mut mantissa = digits(&mut i);
    if s.get(i) == Some(&b'.') {
        i += 1;
        mantissa += digits(&mut i);
    }
    if mantissa == 0 {
        return None;
    }
    if matches!(s.get(i), Some(b'e' | b'E')) {
        i += 1;
        i += usize::from(matches!(s.get(i), Some(b'+' | b'-')));
        if digits(&mut i) == 0 {
            return None;
        }
    }
    if i != s.len() {
        return None;
    }
    // Only ASCII digits, signs, `.` and `e` were accepted above.
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// `tonumber(e [, base])` with Lua 5.1's behaviour and error texts; upvalue
/// 1 is Lua's own `tonumber`, used for bases other than 10.
///
/// # Safety
/// Lua calls it with that upvalue. Errors are raised by Lua's argument
/// checks, which unwind past this frame while it holds nothing that needs
/// dropping.
pub unsafe extern "C-unwind" fn tonumber(state: *mut lua_State) -> c_int {
    unsafe {
        // Lua's `luaL_optint` truncates the base to a C int.
        let base = ffi::luaL_optinteger(state, 2, 10) as c_int;
        if base != 10 {
            // Checked here, so that an error names `tonumber`: Lua's own
            // below is called from C and would be named `?`.
            ffi::luaL_checklstring(state, 1, std::ptr::null_mut());
            if !(2..=36).contains(&base) {
                ffi::luaL_argerror(state, 2, c"base out of range".as_ptr());
            }
            ffi::lua_pushvalue(state, ffi::lua_upvalueindex(1));
            ffi::lua_insert(state, 1);
            ffi::lua_call(state, ffi::lua_gettop(state) - 1, 1);
            return 1;
        }
        ffi::luaL_checkany(state, 1);
        match ffi::lua_type(state, 1) {
            ffi::LUA_TNUMBER => {
                ffi::lua_pushvalue(state, 1);
                return 1;
            }
            ffi::LUA_TSTRING => {
                let mut len = 0;
                let p = ffi::lua_tolstring(state, 1, &mut len);
                // SAFETY: Lua keeps the string while it is on the stack.
                let s = std::slice::from_raw_parts(p.cast::<u8>(), len);
                if let Some(n) = plain_decimal(s) {
                    ffi::lua_pushnumber(state, n);
                    return 1;
                }
                if ffi::lua_isnumber(state, 1) != 0 {
                    ffi::lua_pushnumber(state, ffi::lua_tonumber(state, 1));
                    return 1;
                }
            }
            _ => {}
        }
        ffi::lua_pushnil(state);
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::{Lua, Value};
    use proptest::prelude::*;

    /// Lua's own conversion of `s` (`strtod` and its rules).
    fn lua_number(lua: &Lua, s: &[u8]) -> Option<f64> {
        let v = Value::String(lua.create_string(s).unwrap());
        lua.coerce_number(v).unwrap()
    }

    #[test]
    fn plain_decimals_and_what_is_left_to_lua() {
        assert_eq!(plain_decimal(b"100"), Some(100.0));
        assert_eq!(plain_decimal(b"-2.5"), Some(-2.5));
        assert_eq!(plain_decimal(b"+.5"), Some(0.5));
        assert_eq!(plain_decimal(b"7."), Some(7.0));
        assert_eq!(plain_decimal(b"1E3"), Some(1000.0));
        assert_eq!(plain_decimal(b"1e-2"), Some(0.01));
        assert_eq!(plain_decimal(b"1e400"), Some(f64::INFINITY));
        assert_eq!(
            plain_decimal(b"-0").map(f64::to_bits),
            Some((-0.0f64).to_bits())
        );
        for other in [
            &b""[..],
            b".",
            b"-",
            b"1e",
            b"1e+",
            b" 1",
            b"1 ",
            b"0x10",
            b"inf",
            b"nan",
            b"1\0",
            b"1.2.3",
            b"--1",
        ] {
            assert_eq!(plain_decimal(other), None, "{other:?}");
        }
    }

    #[test]
    fn tonumber_answers_as_lua_does() {
        let lua = Lua::new();
        let ours: mlua::Function = unsafe {
            lua.exec_raw((), |state| {
                ffi::lua_getglobal(state, c"tonumber".as_ptr());
                ffi::lua_pushcclosure(state, tonumber, 1);
            })
        }
        .unwrap();
        lua.globals().set("fast", ours).unwrap();
        let check = r#"
            local cases = { "100", " 12 ", "0x1F", "1e3", "-0.25", "abc", "", "12\0", "inf", 5, true }
            for _, c in ipairs(cases) do
              local a, b = fast(c), tonumber(c)
              assert(a == b or (a ~= a and b ~= b), tostring(c))
            end
            assert(fast("ff", 16) == 255 and fast("z", 36) == 35 and fast("8", 8) == nil)
            -- Called from Lua, not from `pcall`, so that errors name it.
            local function try(...) local n = fast(...); return n end
            local ok, e = pcall(try)
            assert(not ok and e:find("bad argument #1 to 'fast' %(value expected%)"), e)
            ok, e = pcall(try, "1", 99)
            assert(not ok and e:find("bad argument #2 to 'fast' %(base out of range%)"), e)
            ok, e = pcall(try, nil, 16)
            assert(not ok and e:find("bad argument #1 to 'fast' %(string expected, got nil%)"), e)
            return fast("12\0") == 12 and fast(" 0x10 ") == 16
        "#;
        assert!(lua.load(check).eval::<bool>().unwrap());
    }

    proptest! {
        #[test]
        fn plain_decimals_are_the_doubles_lua_makes(
            s in r"[+-]?[0-9]{0,20}(\.[0-9]{0,20})?([eE][+-]?[0-9]{1,3})?",
        ) {
            let lua = Lua::new();
            let expected = lua_number(&lua, s.as_bytes());
            match plain_decimal(s.as_bytes()) {
                Some(n) => prop_assert_eq!(Some(n.to_bits()), expected.map(f64::to_bits)),
                None => prop_assert!(expected.is_none(), "{} is a number to Lua", s),
            }
        }

        #[test]
        fn no_string_is_a_number_lua_would_not_make(s in r"[ 0-9a-fxA-FX.+\-eE\x00]{0,8}") {
            let lua = Lua::new();
            if let Some(n) = plain_decimal(s.as_bytes()) {
                prop_assert_eq!(Some(n.to_bits()), lua_number(&lua, s.as_bytes()).map(f64::to_bits));
            }
        }
    }
}
