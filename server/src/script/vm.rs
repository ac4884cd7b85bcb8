//! One Lua 5.1 VM per thread, with Redis 7.0's scripting environment, and
//! the run of one script in it.
//!
//! A Lua state is not `Send`, and a script runs on the thread that owns
//! its shard, so each thread keeps its own VM ([`with_vm`]), made the first
//! time the thread runs a script. It compiles a body the first time it
//! runs it, keeps the function by SHA1, and drops them all when the
//! server-wide cache was flushed since (its generation changed).
//!
//! The environment (`prelude.lua` builds the Lua side): the base library
//! without `print`, `dofile`, `loadfile`, `getfenv`, `setfenv`, `module`,
//! `require` and `newproxy` (as Redis 7.0), `string`, `table`, `math`,
//! `coroutine`, Redis's `bit`, `cjson`, `struct` and `cmsgpack`, and the
//! `redis` table; every global and library table read-only. A hook every
//! [`HOOK_EVERY`] instructions measures the run against
//! `busy-reply-threshold` and stops a script SCRIPT KILL asked to stop.

use std::any::Any;
use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::ffi::{c_int, c_void};
use std::panic::AssertUnwindSafe;
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use leasehold_protocol::reply::format_g;
use leasehold_protocol::Reply;
use mlua::ffi::{self, lua_State};
use mlua::{
    Function, HookTriggers, Lua, LuaOptions, MultiValue, Result, StdLib, Table, Value, VmState,
};

use super::cache::{sha1_hex, RunState, Sha};
use super::convert::{bytes_at, error_text, lua_to_reply, push_reply, STACK_LIMIT};
use super::{bit, cjson, cmsgpack, number, structlib};

/// Instructions between two checks of the run's time and of SCRIPT KILL
/// (Redis's hook count): about a millisecond of Lua, so a check costs
/// nothing measurable and a kill lands within milliseconds.
pub const HOOK_EVERY: u32 = 100_000;

/// The Redis version scripts see as `redis.REDIS_VERSION`.
const REDIS_VERSION: &str = "7.0.15";

/// Globals Redis 7.0 leaves to scripts; anything else the base library
/// defines is removed.
const GLOBALS: &[&str] = &[
    "_G",
    "_VERSION",
    "assert",
    "collectgarbage",
    "coroutine",
    "error",
    "gcinfo",
    "getmetatable",
    "ipairs",
    "load",
    "loadstring",
    "math",
    "next",
    "pairs",
    "pcall",
    "rawequal",
    "rawget",
    "rawset",
    "select",
    "setmetatable",
    "string",
    "table",
    "tonumber",
    "tostring",
    "type",
    "unpack",
    "xpcall",
];

/// The text of a script killed by SCRIPT KILL (Redis's).
const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

/// An error a `redis` function raises with Redis's exact text (a Lua
/// error table `{err = text}` in Redis). The functions are Rust, as
/// Redis's are C: a tail call `return redis.call(...)` keeps the script's
/// frame, so the error names its line.
#[derive(Debug, Clone)]
pub struct ScriptError(pub String);

impl std::fmt::Display for ScriptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScriptError {}

fn raise(text: impl Into<String>) -> mlua::Error {
    mlua::Error::external(ScriptError(text.into()))
}

/// The error under mlua's callback wrappers.
fn root(e: &mlua::Error) -> &mlua::Error {
    match e {
        mlua::Error::CallbackError { cause, .. } => root(cause),
        other => other,
    }
}

/// What one run needs to know and what it found out; shared by the VM's
/// Rust functions and its hook.
#[derive(Debug)]
pub struct RunCell {
    start: Cell<Instant>,
    threshold: Cell<Duration>,
    state: RefCell<Option<Arc<RunState>>>,
    published: Cell<bool>,
    wrote: Cell<bool>,
    killed: Cell<bool>,
    resp3: Cell<bool>,
    read_only: Cell<bool>,
    /// The running script's `redis.call` target, set by [`Vm::run`] for
    /// the length of the run only (see [`CommandSlot`]).
    command: Cell<Option<NonNull<CommandFn<'static>>>>,
    scratch: CallScratch,
}

/// Kept from one `redis.call` to the next, so that a call allocates
/// nothing for its arguments: their bytes (one buffer, which each call's
/// arguments are slices of, reclaimed once they are dropped), where each
/// ends, and the vector of them. And a panic in a command `redis.call`
/// ran, resumed when the script has unwound out of Lua.
#[derive(Default)]
struct CallScratch {
    bytes: Cell<BytesMut>,
    ends: Cell<Vec<usize>>,
    argv: Cell<Vec<Bytes>>,
    panic: Cell<Option<Box<dyn Any + Send>>>,
}

impl std::fmt::Debug for CallScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallScratch").finish_non_exhaustive()
    }
}

/// What runs one `redis.call`: its arguments (name first) to its reply.
/// It may take the vector, or leave it (emptied or not) for the next call.
pub type CommandFn<'a> = dyn FnMut(&RunCell, &mut Vec<Bytes>) -> Reply + 'a;

/// Puts a run's command target into its [`RunCell`] and takes it out again
/// when dropped, also when the run unwinds.
///
/// The VM's `redis.call` and `redis.pcall` are made once with the VM, not
/// per run (a per-run `Lua::scope` with two fresh functions cost about a
/// tenth of a short script's run), so they reach the borrowed target
/// through this pointer. It is sound because Lua code runs only inside
/// [`Vm::run`], while the slot is alive and the target borrowed by it, and
/// because calls never nest: no command a script may call runs Lua.
struct CommandSlot<'r> {
    run: &'r RunCell,
}

impl<'r> CommandSlot<'r> {
    fn fill<'a>(run: &'r RunCell, target: &'a mut CommandFn<'a>) -> CommandSlot<'r> {
        let ptr: NonNull<CommandFn<'a>> = NonNull::from(target);
        // SAFETY: only the lifetime is erased; the pointer is taken out in
        // `drop`, before the borrow of `target` ends.
        let ptr: NonNull<CommandFn<'static>> = unsafe { std::mem::transmute(ptr) };
        run.command.set(Some(ptr));
        CommandSlot { run }
    }
}

impl Drop for CommandSlot<'_> {
    fn drop(&mut self) {
        self.run.command.set(None);
    }
}

impl RunCell {
    /// Runs one `redis.call` on the running script's target, or fails
    /// when no script runs (a function kept past its run).
    fn command(&self, argv: &mut Vec<Bytes>) -> std::result::Result<Reply, &'static str> {
        let Some(mut ptr) = self.command.take() else {
            return Err("ERR redis.call is only available while a script runs");
        };
        // SAFETY: the slot is filled only while `Vm::run` borrows the
        // target (see `CommandSlot`), and taken out for the call, so no
        // second `&mut` to it can exist meanwhile.
        let reply = unsafe { ptr.as_mut() }(self, argv);
        self.command.set(Some(ptr));
        Ok(reply)
    }

    fn new() -> RunCell {
        RunCell {
            start: Cell::new(Instant::now()),
            threshold: Cell::new(Duration::from_secs(5)),
            state: RefCell::new(None),
            published: Cell::new(false),
            wrote: Cell::new(false),
            killed: Cell::new(false),
            resp3: Cell::new(false),
            read_only: Cell::new(false),
            command: Cell::new(None),
            scratch: CallScratch::default(),
        }
    }

    /// Whether the script was started with EVAL_RO or EVALSHA_RO.
    pub fn read_only(&self) -> bool {
        self.read_only.get()
    }

    /// The script is about to write. False when SCRIPT KILL came first:
    /// the write must not happen (the script is stopping).
    pub fn before_write(&self) -> bool {
        self.wrote.set(true);
        if self.published.get() {
            let state = self.state.borrow();
            if state.as_ref().is_some_and(|s| !s.note_write()) {
                self.killed.set(true);
                return false;
            }
        }
        true
    }

    /// The reply a write gets when the script was killed before it.
    pub fn killed_reply() -> Reply {
        Reply::err(KILLED)
    }

    /// The hook: publishes BUSY past the threshold, stops a killed script.
    fn check(&self) -> Result<VmState> {
        if self.killed.get() {
            return Err(mlua::Error::runtime(KILLED));
        }
        let state = self.state.borrow();
        let Some(state) = state.as_ref() else {
            return Ok(VmState::Continue);
        };
        if !self.published.get() && self.start.get().elapsed() >= self.threshold.get() {
            state.publish_busy(self.wrote.get());
            self.published.set(true);
        }
        if self.published.get() && state.kill_requested() {
            tracing::warn!("Lua script killed by user with SCRIPT KILL.");
            self.killed.set(true);
            return Err(mlua::Error::runtime(KILLED));
        }
        Ok(VmState::Continue)
    }
}

/// How a script runs.
#[derive(Debug)]
pub struct RunOpts {
    /// Its SHA1 (error replies name it).
    pub sha: Sha,
    /// EVAL_RO / EVALSHA_RO: write commands are refused.
    pub read_only: bool,
    /// `busy-reply-threshold`.
    pub threshold: Duration,
    /// The running shard's state, which other threads read.
    pub state: Arc<RunState>,
}

/// One thread's Lua VM.
pub struct Vm {
    lua: Lua,
    /// The table behind the read-only globals (KEYS and ARGV are set here).
    globals: Table,
    /// The error handler a script runs under (Redis's
    /// `__redis__err__handler`): an error's `{err = text}` with where.
    handler: Function,
    run: Rc<RunCell>,
    functions: hashbrown::HashMap<Sha, Function>,
    generation: u64,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("functions", &self.functions.len())
            .finish()
    }
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's VM, made on first use. `known` answers
/// whether a command name exists (`redis.acl_check_cmd`). Scripts never
/// nest (EVAL is not allowed from a script), so the VM is never borrowed
/// twice.
pub fn with_vm<R>(known: fn(&[u8]) -> bool, f: impl FnOnce(&mut Vm) -> R) -> R {
    VM.with(|cell| {
        let mut slot = cell.borrow_mut();
        let vm = slot.get_or_insert_with(|| {
            // Only an allocation failure can fail this.
            Vm::new(known).expect("the Lua VM and its libraries are created")
        });
        f(vm)
    })
}

/// `{err = text}`, Redis's error table.
fn err_table(lua: &Lua, text: &str) -> Result<Table> {
    let t = lua.create_table_with_capacity(0, 1)?;
    t.raw_set("err", text)?;
    Ok(t)
}

/// `redis.error_reply`'s error text, as Redis 7.0 makes it: the first word
/// (a leading `-` dropped) is the code, `ERR` when there is only one word
/// (`boom` is `ERR boom`, `x y` is `x y`); no trailing CR or LF.
fn error_reply_text(given: &str) -> String {
    // `redis.error_reply` puts a `-` in front when there is none.
    let rest = given.strip_prefix('-').unwrap_or(given);
    let (code, msg) = rest.split_once(' ').unwrap_or(("ERR", rest));
    format!("{code} {}", msg.trim_matches(['\r', '\n']))
}

/// The message of an error raised from Rust (a `redis` function, a
/// library function, the hook).
fn rust_error_message(e: &mlua::Error) -> String {
    match root(e) {
        mlua::Error::RuntimeError(m) => m.clone(),
        other => match other.downcast_ref::<ScriptError>() {
            Some(ScriptError(text)) => text.clone(),
            None => other.to_string(),
        },
    }
}

/// The innermost frame of the user's script: its source and current line.
fn user_frame(lua: &Lua) -> Option<(String, usize)> {
    for level in 1..256 {
        let found = lua.inspect_stack(level, |d| {
            let src = d.source().source.map(|s| s.into_owned());
            (src, d.current_line())
        })?;
        if let (Some(src), Some(line)) = found {
            if src == "@user_script" {
                return Some((src, line));
            }
        }
    }
    None
}

impl Vm {
    fn new(known: fn(&[u8]) -> bool) -> Result<Vm> {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::new())?;
        let globals = lua.globals();
        let names: Vec<Value> = globals
            .pairs::<Value, Value>()
            .map(|p| p.map(|(k, _)| k))
            .collect::<Result<_>>()?;
        for k in names {
            let keep = matches!(&k, Value::String(s) if GLOBALS.iter().any(|g| s.as_bytes() == g.as_bytes()));
            if !keep {
                globals.raw_set(k, Value::Nil)?;
            }
        }
        // SAFETY: pushes a closure of one upvalue, Lua's own `tonumber`.
        let tonumber: Function = unsafe {
            lua.exec_raw((), |state| {
                ffi::lua_getglobal(state, c"tonumber".as_ptr());
                ffi::lua_pushcclosure(state, number::tonumber, 1);
            })?
        };
        globals.raw_set("tonumber", tonumber)?;
        bit::register(&lua, &globals)?;
        cjson::register(&lua, &globals)?;
        cmsgpack::register(&lua, &globals)?;
        structlib::register(&lua, &globals)?;
        let run = Rc::new(RunCell::new());
        let redis = lua.create_table()?;
        let prim = lua.create_table()?;
        Self::register_redis(&lua, &redis, &run, known)?;
        globals.raw_set("redis", redis.clone())?;
        let handler = {
            let run = run.clone();
            lua.create_function(move |lua, err: Value| {
                let line_prefix = |lua: &Lua| match user_frame(lua) {
                    Some((_, line)) => format!("user_script:{line}: "),
                    None => String::new(),
                };
                let t = match err {
                    _ if run.killed.get() => err_table(lua, KILLED)?,
                    Value::Table(t) => t,
                    Value::Error(e) if root(&e).downcast_ref::<ScriptError>().is_some() => {
                        err_table(lua, &rust_error_message(&e))?
                    }
                    Value::Error(e) => {
                        let text = format!("ERR {}{}", line_prefix(lua), rust_error_message(&e));
                        err_table(lua, &text)?
                    }
                    other => {
                        let text = match &other {
                            Value::String(s) => s.to_string_lossy(),
                            v => lua
                                .coerce_string(v.clone())?
                                .map(|s| s.to_string_lossy())
                                .unwrap_or_else(|| v.type_name().into()),
                        };
                        err_table(lua, &format!("ERR {text}"))?
                    }
                };
                if let Some((source, line)) = user_frame(lua) {
                    t.raw_set("source", source)?;
                    t.raw_set("line", line)?;
                }
                Ok(t)
            })?
        };
        let killed = {
            let run = run.clone();
            lua.create_function(move |_, ()| Ok(run.killed.get()))?
        };
        prim.raw_set(
            "error_text",
            lua.create_function(|_, e: Value| {
                Ok(match e {
                    Value::Error(e) => rust_error_message(&e),
                    other => format!("{other:?}"),
                })
            })?,
        )?;
        let env: Table = lua
            .load(include_str!("prelude.lua"))
            .set_name("=prelude")
            .call((
                globals.clone(),
                redis.clone(),
                prim,
                handler.clone(),
                killed,
            ))?;
        lua.set_globals(env)?;
        let hook_run = run.clone();
        lua.set_hook(
            HookTriggers::new().every_nth_instruction(HOOK_EVERY),
            move |_, _| hook_run.check(),
        )?;
        Ok(Vm {
            lua,
            globals,
            handler,
            run,
            functions: hashbrown::HashMap::new(),
            generation: 0,
        })
    }

    /// The `redis` table's constants and functions.
    fn register_redis(
        lua: &Lua,
        redis: &Table,
        run: &Rc<RunCell>,
        known: fn(&[u8]) -> bool,
    ) -> Result<()> {
        for (name, level) in [
            ("LOG_DEBUG", 0),
            ("LOG_VERBOSE", 1),
            ("LOG_NOTICE", 2),
            ("LOG_WARNING", 3),
        ] {
            redis.raw_set(name, level)?;
        }
        for (name, flag) in [
            ("REPL_NONE", 0),
            ("REPL_AOF", 1),
            ("REPL_SLAVE", 2),
            ("REPL_REPLICA", 2),
            ("REPL_ALL", 3),
        ] {
            redis.raw_set(name, flag)?;
        }
        redis.raw_set("REDIS_VERSION", REDIS_VERSION)?;
        redis.raw_set("REDIS_VERSION_NUM", 0x07000f)?;
        let number = |v: &Value| match v {
            Value::Integer(i) => Some(*i as f64),
            Value::Number(n) => Some(*n),
            _ => None,
        };
        redis.raw_set(
            "sha1hex",
            lua.create_function(|lua, args: MultiValue| {
                if args.len() != 1 {
                    return Err(raise("ERR wrong number of arguments"));
                }
                let text = lua
                    .coerce_string(args[0].clone())?
                    .map(|s| s.as_bytes().to_vec())
                    .unwrap_or_default();
                lua.create_string(sha1_hex(&text))
            })?,
        )?;
        redis.raw_set(
            "log",
            lua.create_function(move |lua, args: MultiValue| {
                if args.len() < 2 {
                    return Err(raise("ERR redis.log() requires two arguments or more."));
                }
                let Some(level) = number(&args[0]) else {
                    return Err(raise("ERR First argument must be a number (log level)."));
                };
                let mut text = String::new();
                for (i, v) in args.iter().skip(1).enumerate() {
                    if i > 0 {
                        text.push(' ');
                    }
                    if let Some(s) = lua.coerce_string(v.clone())? {
                        text.push_str(&s.to_string_lossy());
                    }
                }
                match level as i64 {
                    0 | 1 => tracing::debug!(target: "leasehold_server::script", "{text}"),
                    2 => tracing::info!(target: "leasehold_server::script", "{text}"),
                    3 => tracing::warn!(target: "leasehold_server::script", "{text}"),
                    _ => return Err(raise("ERR Invalid debug level.")),
                }
                Ok(())
            })?,
        )?;
        let resp_run = run.clone();
        redis.raw_set(
            "setresp",
            lua.create_function(move |_, args: MultiValue| {
                if args.len() != 1 {
                    return Err(raise("ERR redis.setresp() requires one argument."));
                }
                match number(&args[0]) {
                    Some(v) if v == 2.0 || v == 3.0 => resp_run.resp3.set(v == 3.0),
                    _ => return Err(raise("ERR RESP version must be 2 or 3.")),
                }
                Ok(())
            })?,
        )?;
        redis.raw_set(
            "set_repl",
            lua.create_function(move |_, args: MultiValue| {
                if args.len() != 1 {
                    return Err(raise("ERR redis.set_repl() requires one argument."));
                }
                // Writes always replicate as their effects: valid flags
                // are accepted and change nothing.
                match number(&args[0]) {
                    Some(f) if (0.0..=3.0).contains(&f) && f.fract() == 0.0 => Ok(()),
                    _ => Err(raise("ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.")),
                }
            })?,
        )?;
        redis.raw_set(
            "acl_check_cmd",
            lua.create_function(move |_, args: MultiValue| match args.front() {
                Some(Value::String(s)) if known(&s.as_bytes()) => Ok(true),
                Some(_) => Err(raise("ERR Invalid command passed to redis.acl_check_cmd()")),
                None => Err(raise(
                    "ERR Please specify at least one argument for this redis lib call",
                )),
            })?,
        )?;
        redis.raw_set(
            "error_reply",
            lua.create_function(|lua, args: MultiValue| {
                match args.iter().collect::<Vec<_>>().as_slice() {
                    [Value::String(s)] => err_table(lua, &error_reply_text(&s.to_string_lossy())),
                    _ => err_table(lua, "ERR wrong number or type of arguments"),
                }
            })?,
        )?;
        redis.raw_set(
            "status_reply",
            lua.create_function(|lua, args: MultiValue| {
                match args.iter().collect::<Vec<_>>().as_slice() {
                    [Value::String(s)] => {
                        let t = lua.create_table_with_capacity(0, 1)?;
                        t.raw_set("ok", (*s).clone())?;
                        Ok(t)
                    }
                    _ => err_table(lua, "ERR wrong number or type of arguments"),
                }
            })?,
        )?;
        // `redis.call` and `redis.pcall` are Lua C functions whose upvalue
        // is the VM's RunCell (see `redis_call`).
        let cell = Rc::as_ptr(run).cast_mut().cast::<c_void>();
        for (name, f) in [
            ("call", redis_call::<false> as ffi::lua_CFunction),
            ("pcall", redis_call::<true>),
        ] {
            // SAFETY: pushes a closure of one light userdata upvalue.
            let f: Function = unsafe {
                lua.exec_raw((), |state| {
                    ffi::lua_pushlightuserdata(state, cell);
                    ffi::lua_pushcclosure(state, f, 1);
                })?
            };
            redis.raw_set(name, f)?;
        }
        redis.raw_set("replicate_commands", lua.create_function(|_, ()| Ok(true))?)?;
        redis.raw_set("breakpoint", lua.create_function(|_, ()| Ok(false))?)?;
        redis.raw_set("debug", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
        Ok(())
    }

    /// Drops every compiled function when the cache was flushed since
    /// they were compiled.
    pub fn sync(&mut self, generation: u64) {
        if generation != self.generation {
            self.functions.clear();
            self.generation = generation;
        }
    }

    /// The compiled function of script `sha`, if this VM has it.
    pub fn function(&self, sha: &Sha) -> Option<&Function> {
        self.functions.get(sha)
    }

    /// Compiles `body` (whose SHA1 is `sha`) and keeps it.
    ///
    /// # Errors
    /// `ERR Error compiling script (new function): <Lua's message>`.
    pub fn compile(&mut self, sha: Sha, body: &[u8]) -> std::result::Result<Function, Reply> {
        let f = self
            .lua
            .load(body)
            .set_name("@user_script")
            .into_function()
            .map_err(|e| {
                let message = match e {
                    mlua::Error::SyntaxError { message, .. } => message,
                    other => other.to_string(),
                };
                error_text(
                    format!(
                        "ERR Error compiling script (new function): {}",
                        message.trim_end()
                    )
                    .as_bytes(),
                )
            })?;
        self.functions.insert(sha, f.clone());
        Ok(f)
    }

    /// Runs `f` with `keys` and `argv` as KEYS and ARGV; `command` runs one
    /// `redis.call` (its arguments, name first) and answers its reply.
    pub fn run(
        &self,
        f: &Function,
        keys: &[Bytes],
        argv: &[Bytes],
        opts: RunOpts,
        command: &mut CommandFn<'_>,
    ) -> Reply {
        let run = &*self.run;
        run.start.set(Instant::now());
        run.threshold.set(opts.threshold);
        *run.state.borrow_mut() = Some(opts.state);
        run.published.set(false);
        run.wrote.set(false);
        run.killed.set(false);
        run.resp3.set(false);
        run.read_only.set(opts.read_only);
        let reply = self
            .run_inner(f, keys, argv, &opts.sha, command)
            .unwrap_or_else(|e| {
                error_text(
                    format!("ERR Error running script: {}", rust_error_message(&e)).as_bytes(),
                )
            });
        let state = run.state.borrow_mut().take();
        if run.published.get() {
            state.inspect(|s| s.clear());
        }
        if let Some(payload) = run.scratch.panic.take() {
            std::panic::resume_unwind(payload);
        }
        reply
    }

    fn run_inner(
        &self,
        f: &Function,
        keys: &[Bytes],
        argv: &[Bytes],
        sha: &Sha,
        command: &mut CommandFn<'_>,
    ) -> Result<Reply> {
        let too_many = || raise("ERR too many arguments");
        let nk = c_int::try_from(keys.len()).map_err(|_| too_many())?;
        let na = c_int::try_from(argv.len()).map_err(|_| too_many())?;
        let run = &*self.run;
        let _slot = CommandSlot::fill(run, command);
        let mut reply = None;
        // One protected call sets KEYS and ARGV, runs the script under the
        // handler and converts its value, on the Lua stack (a handle per
        // string, per table and per call cost about a tenth of a short
        // script's run). Its arguments are at 1 (the globals), 2 (the
        // handler) and 3 (the script).
        // SAFETY: only a failed allocation raises here (the script's own
        // errors stop at the handler's `lua_pcall`); the VM has no memory
        // limit, so none does, as mlua assumes; the stack is left empty,
        // or holding only the error value.
        let failure: Value = unsafe {
            self.lua
                .exec_raw((&self.globals, &self.handler, f), |state| {
                    for (name, items, n) in [(c"KEYS", keys, nk), (c"ARGV", argv, na)] {
                        ffi::lua_createtable(state, n, 0);
                        for (i, item) in items.iter().enumerate() {
                            ffi::lua_pushlstring(state, item.as_ptr().cast(), item.len());
                            ffi::lua_rawseti(state, -2, i as i64 + 1);
                        }
                        ffi::lua_setfield(state, 1, name.as_ptr());
                    }
                    ffi::lua_pushvalue(state, 3);
                    if ffi::lua_pcall(state, 0, 1, 2) == 0 {
                        reply = Some(lua_to_reply(state, -1, run.resp3.get()));
                        ffi::lua_settop(state, 0);
                    } else {
                        ffi::lua_replace(state, 1);
                        ffi::lua_settop(state, 1);
                    }
                })?
        };
        match reply {
            Some(reply) => Ok(reply),
            None => failed(&failure, sha),
        }
    }
}

/// Redis's refusal of a `redis.call` without arguments.
const NO_ARGUMENTS: &str = "ERR Please specify at least one argument for this redis lib call";
/// Redis's refusal of a `redis.call` argument of another type.
const BAD_ARGUMENT: &str = "ERR Lua redis lib command arguments must be strings or integers";

/// `redis.call` (`PROTECTED` false) and `redis.pcall` (true), as Lua C
/// functions reading their arguments from the stack and pushing the reply
/// there (as Redis's are; mlua's callbacks and values cost about a third
/// of a short script's run). A failed call raises `{err = text}` (Redis's
/// error table; the handler adds where), or `redis.pcall` returns it.
///
/// # Safety
/// Lua calls it with upvalue 1 the VM's [`RunCell`], which outlives the Lua
/// state. `lua_error` unwinds past this frame only when it holds nothing
/// that needs dropping; a panic is caught, kept for [`Vm::run`] to resume,
/// and stops the script (this call and every later one raise).
unsafe extern "C-unwind" fn redis_call<const PROTECTED: bool>(state: *mut lua_State) -> c_int {
    unsafe {
        let run = &*ffi::lua_touserdata(state, ffi::lua_upvalueindex(1)).cast::<RunCell>();
        // After a panic no command runs: the script only unwinds.
        let earlier = run.scratch.panic.take();
        let outcome = match earlier {
            Some(payload) => Err(payload),
            None => std::panic::catch_unwind(AssertUnwindSafe(|| call_on_stack(state, run))),
        };
        let (text, panicked) = match outcome {
            Ok(Ok(())) => return 1,
            Ok(Err(text)) => (text, false),
            Err(payload) => {
                run.scratch.panic.set(Some(payload));
                (Cow::Borrowed("ERR the command failed"), true)
            }
        };
        ffi::lua_createtable(state, 0, 1);
        ffi::lua_pushlstring(state, text.as_ptr().cast(), text.len());
        ffi::lua_setfield(state, -2, c"err".as_ptr());
        drop(text);
        if PROTECTED && !panicked {
            return 1;
        }
        ffi::lua_error(state)
    }
}

/// One `redis.call` of the running script, its arguments on the stack:
/// pushes the reply, or answers the error's text.
unsafe fn call_on_stack(
    state: *mut lua_State,
    run: &RunCell,
) -> std::result::Result<(), Cow<'static, str>> {
    unsafe {
        let n = ffi::lua_gettop(state);
        if n == 0 {
            return Err(Cow::Borrowed(NO_ARGUMENTS));
        }
        let mut bytes = run.scratch.bytes.take();
        let mut ends = run.scratch.ends.take();
        ends.clear();
        let mut typed = true;
        for i in 1..=n {
            match ffi::lua_type(state, i) {
                ffi::LUA_TSTRING => bytes.extend_from_slice(bytes_at(state, i)),
                ffi::LUA_TNUMBER => put_number(&mut bytes, ffi::lua_tonumber(state, i)),
                _ => {
                    typed = false;
                    break;
                }
            }
            ends.push(bytes.len());
        }
        let all = bytes.split().freeze();
        run.scratch.bytes.set(bytes);
        let mut argv = run.scratch.argv.take();
        argv.clear();
        if typed {
            let mut start = 0;
            argv.extend(ends.iter().map(|&end| {
                let arg = all.slice(start..end);
                start = end;
                arg
            }));
        }
        run.scratch.ends.set(ends);
        drop(all);
        let result = match typed {
            true => run.command(&mut argv).map_err(Cow::Borrowed),
            false => Err(Cow::Borrowed(BAD_ARGUMENT)),
        };
        argv.clear();
        run.scratch.argv.set(argv);
        match result? {
            Reply::Error(e) => Err(e),
            reply if push_reply(state, &reply, run.resp3.get()) => Ok(()),
            _ => Err(Cow::Borrowed(STACK_LIMIT)),
        }
    }
}

/// A number argument of `redis.call` as Redis 7.0 writes it (`%.17g`).
fn put_number(out: &mut BytesMut, n: f64) {
    // Integral values below 1e17 print as their digits (the common case,
    // without formatting a float).
    if n.fract() == 0.0 && n.abs() < 1e17 && n != 0.0 {
        out.extend_from_slice(itoa::Buffer::new().format(n as i64).as_bytes());
    } else {
        out.extend_from_slice(format_g(n, 17).as_bytes());
    }
}

/// The reply of a script that raised: its error table's text, then
/// ` script: <sha>, on <source>:<line>.` when the handler found where.
fn failed(value: &Value, sha: &Sha) -> Result<Reply> {
    let Value::Table(t) = value else {
        return Ok(Reply::err("ERR execution failure"));
    };
    let msg: Value = t.raw_get("err")?;
    let msg = match &msg {
        Value::String(s) => s.to_string_lossy(),
        _ => "ERR execution failure".to_string(),
    };
    let source: Option<String> = t.raw_get("source")?;
    let line: Option<i64> = t.raw_get("line")?;
    let text = match (source, line) {
        (Some(source), Some(line)) => {
            let sha = String::from_utf8_lossy(sha);
            format!("{msg} script: {sha}, on {source}:{line}.")
        }
        _ => msg,
    };
    Ok(error_text(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_reply_takes_redis_code_rules() {
        assert_eq!(error_reply_text("boom"), "ERR boom");
        assert_eq!(error_reply_text("-boom"), "ERR boom");
        assert_eq!(error_reply_text("-MY boom\r\n"), "MY boom");
        assert_eq!(error_reply_text("x y"), "x y");
    }
}
