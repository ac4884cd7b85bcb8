//! A tiny blocking RESP connection for set-up calls (SCRIPT LOAD, INFO,
//! DBSIZE, probes, a pipelined fill), never for measured load.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::BytesMut;
use leasehold_protocol::{decode_reply, encode_request, Reply};

/// One blocking connection.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

impl Conn {
    /// Connects to `addr` (`host:port`) with a 5 s read/write timeout.
    ///
    /// # Errors
    /// The connect error.
    pub fn connect(addr: &str) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(4096),
        })
    }

    /// Sends one command and reads its reply (an error reply is `Ok`).
    ///
    /// # Errors
    /// I/O errors, a closed connection, or an undecodable reply.
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<Reply> {
        let mut out = BytesMut::new();
        encode_request(args, &mut out);
        self.stream.write_all(&out)?;
        self.read_reply()
    }

    /// Sends every request of `requests` in one write and reads their
    /// replies, in order (error replies are `Ok`).
    ///
    /// # Errors
    /// As [`Conn::call`].
    pub fn pipeline<A: AsRef<[u8]>>(&mut self, requests: &[Vec<A>]) -> std::io::Result<Vec<Reply>> {
        let mut out = BytesMut::new();
        for r in requests {
            encode_request(r, &mut out);
        }
        self.stream.write_all(&out)?;
        (0..requests.len()).map(|_| self.read_reply()).collect()
    }

    /// Sends `args` and returns the reply as text (bulk or simple string).
    ///
    /// # Errors
    /// As [`Conn::call`], plus an error reply or a reply that is not a string.
    pub fn call_text<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<String> {
        match self.call(args)? {
            Reply::Bulk(b) | Reply::Verbatim(_, b) => Ok(String::from_utf8_lossy(&b).into_owned()),
            Reply::Simple(s) => Ok(s.into_owned()),
            other => Err(invalid(format!("unexpected reply {other:?}"))),
        }
    }

    /// Sends `args` and returns the integer reply.
    ///
    /// # Errors
    /// As [`Conn::call`], plus a reply that is not an integer.
    pub fn call_int<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<i64> {
        match self.call(args)? {
            Reply::Int(i) => Ok(i),
            other => Err(invalid(format!("unexpected reply {other:?}"))),
        }
    }

    /// `used_memory` from `INFO memory`, in bytes.
    ///
    /// # Errors
    /// As [`Conn::call`], plus an INFO without that field.
    pub fn used_memory(&mut self) -> std::io::Result<u64> {
        let info = self.call_text(&["INFO", "memory"])?;
        info_field(&info, "used_memory")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| invalid("INFO memory has no used_memory".into()))
    }

    fn read_reply(&mut self) -> std::io::Result<Reply> {
        loop {
            if let Some(r) = decode_reply(&mut self.buf).map_err(|e| invalid(e.to_string()))? {
                return Ok(r);
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "connection closed",
                ));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// The value of `field` in an INFO text (`field:value` lines).
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Reads a script file and loads it with SCRIPT LOAD; returns its SHA1.
///
/// # Errors
/// The file or connection error, or the server's error reply.
pub fn load_script(addr: &str, path: &std::path::Path) -> std::io::Result<String> {
    let body = std::fs::read(path)?;
    let mut conn = Conn::connect(addr)?;
    match conn.call(&[&b"SCRIPT"[..], b"LOAD", &body])? {
        Reply::Bulk(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
        other => Err(invalid(format!(
            "SCRIPT LOAD {}: {other:?}",
            path.display()
        ))),
    }
}

/// An `InvalidData` I/O error with `msg`.
pub fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields() {
        let info = "# Memory\r\nused_memory:12345\r\nused_memory_human:12.06K\r\n";
        assert_eq!(info_field(info, "used_memory"), Some("12345"));
        assert_eq!(info_field(info, "used_memory_human"), Some("12.06K"));
        assert_eq!(info_field(info, "maxmemory"), None);
    }
}
