//! Requests through redis-rs, a real client, for tests that check values
//! rather than reply bytes.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, Value};

/// How long one async test body may run (passed to [`crate::block_on`]): 30 s.
pub const LIMIT: Duration = Duration::from_secs(30);

/// Runs one command given as words (`&["SET", "k", "v"]`) and converts its
/// reply to `T`.
///
/// # Panics
/// When the command fails, with the request and the error text.
pub async fn q<T: FromRedisValue>(con: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut c = redis::cmd(args[0]);
    c.arg(&args[1..]);
    match c.query_async(con).await {
        Ok(v) => v,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

/// Runs one command that must fail; returns the error's full text
/// (`CODE detail`, e.g. `ERR syntax error`).
///
/// # Panics
/// When the command succeeds.
pub async fn q_err(con: &mut MultiplexedConnection, args: &[&str]) -> String {
    let mut c = redis::cmd(args[0]);
    c.arg(&args[1..]);
    match c.query_async::<Value>(con).await {
        Ok(v) => panic!("{args:?}: expected an error, got {v:?}"),
        Err(e) => format!("{} {}", e.code().unwrap_or("?"), e.detail().unwrap_or("")),
    }
}
