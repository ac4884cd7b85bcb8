//! Scripting's pure parts: Lua 5.1 VMs with Redis 7.0's environment, the
//! conversions between replies and Lua values, the libraries Redis ships
//! (`bit`, `cjson`, `cmsgpack`, `struct`), and the server-wide script
//! cache. Nothing here knows the command table or the keyspace: the
//! `scripting` command family (`commands/scripting.rs`) hands a run the
//! function that executes each `redis.call`. `docs/scripting.md` tells the
//! whole design.
//!
//! # Layout
//! - [`cache`]: bodies by SHA1, the flush generation, each shard's run
//!   state (BUSY, written, kill requested);
//! - [`vm`]: one VM per thread, compiling, running, the time hook;
//! - [`convert`]: reply <-> Lua value, both RESP versions;
//! - [`number`]: `tonumber`, with a fast path for plain decimals;
//! - [`bit`], [`cjson`], [`cmsgpack`], [`structlib`]: the libraries.

pub mod bit;
pub mod cache;
pub mod cjson;
pub mod cmsgpack;
pub mod convert;
pub mod number;
pub mod structlib;
pub mod vm;
