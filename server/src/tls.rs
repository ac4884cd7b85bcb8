//! TLS, as Redis 7 offers it (`tls-port`, `tls-cert-file`, `tls-key-file`,
//! `tls-ca-cert-file`, `tls-auth-clients`, `tls-replication`; Redis's
//! `TLS.md`), with rustls on the ring provider.
//!
//! [`server_config`] builds the server's rustls configuration once at start
//! from the PEM files (a bad file stops the start with a message naming it);
//! [`Session`] is one TLS connection as the event loop drives it over a
//! non-blocking socket: ciphertext in from the socket, plaintext out to the
//! connection's read buffer, plaintext replies in and ciphertext out.
//! [`client_config`] is what a replica with `tls-replication yes` connects to
//! its primary with, [`BlockingStream`] a blocking TLS stream (a replica's
//! handshake), and [`relay`] carries a replication connection's TLS stream
//! to a plain loopback socket, so that the replication code (a replica's
//! link served by the event loop, a primary's feed threads) reads and
//! writes one `TcpStream` whether the link is TLS or not: two relay threads
//! per TLS link, for code that has no TLS in it.
//!
//! In the bottom layer: it imports only `config`.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};

use crate::config::TlsConfig;

/// The crypto provider: ring (no aws-lc, which needs cmake and a C
/// toolchain to build).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of PEM file `path`, which the setting `name` names.
fn certs(name: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let iter = CertificateDer::pem_file_iter(Path::new(path))
        .map_err(|e| format!("cannot read {name} {path}: {e}"))?;
    let certs = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot read {name} {path}: {e}"))?;
    match certs.is_empty() {
        true => Err(format!("{name} {path} holds no PEM certificate")),
        false => Ok(certs),
    }
}

/// The private key of PEM file `path` (`tls-key-file`).
fn key(path: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(Path::new(path)).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("tls-key-file {path} holds no PEM private key")
        }
        e => format!("cannot read tls-key-file {path}: {e}"),
    })
}

/// The CA certificates of `tls-ca-cert-file`, as a root store.
fn roots(path: &str) -> Result<Arc<RootCertStore>, String> {
    let mut roots = RootCertStore::empty();
    for cert in certs("tls-ca-cert-file", path)? {
        roots
            .add(cert)
            .map_err(|e| format!("tls-ca-cert-file {path}: {e}"))?;
    }
    Ok(Arc::new(roots))
}

/// The files a TLS port needs, each named: the certificate and key, and
/// the CA file when clients must show a certificate or replication uses
/// TLS (Redis refuses to start without it then, too).
fn check_files(c: &TlsConfig) -> Result<(), String> {
    if c.cert_file.is_empty() || c.key_file.is_empty() {
        return Err("tls-port and tls-replication need tls-cert-file and tls-key-file".into());
    }
    if c.ca_cert_file.is_empty() && (c.auth_clients != "no" || c.replication) {
        return Err(format!(
            "tls-ca-cert-file must be set when tls-auth-clients is {} or tls-replication is yes \
             (tls-auth-clients no serves clients without certificates)",
            c.auth_clients
        ));
    }
    Ok(())
}

/// The server's rustls configuration from `[tls]`: the certificate chain
/// and key, and, with `tls-auth-clients yes` or `optional`, client
/// certificates checked against `tls-ca-cert-file` (required with `yes`;
/// with `optional` a client may show none). TLS 1.2 and 1.3, as Redis's
/// default `tls-protocols`.
///
/// # Errors
/// A message naming the setting and file at fault: a file that cannot be
/// read, holds no certificate or key, a key that does not match the
/// certificate, a missing setting.
pub fn server_config(c: &TlsConfig) -> Result<Arc<ServerConfig>, String> {
    check_files(c)?;
    let chain = certs("tls-cert-file", &c.cert_file)?;
    let key = key(&c.key_file)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match c.auth_clients.as_str() {
        "no" => builder.with_no_client_auth(),
        auth => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(roots(&c.ca_cert_file)?, provider());
            let verifier = match auth {
                "optional" => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier
                .build()
                .map_err(|e| format!("tls-ca-cert-file {}: {e}", c.ca_cert_file))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let config = builder.with_single_cert(chain, key).map_err(|e| {
        format!(
            "tls-cert-file {} and tls-key-file {} do not make a certificate and its key: {e}",
            c.cert_file, c.key_file
        )
    })?;
    Ok(Arc::new(config))
}

/// The client configuration a replica connects to its primary with
/// (`tls-replication yes`): the primary's certificate is checked against
/// `tls-ca-cert-file`, and the replica shows its own `tls-cert-file` (as
/// Redis does without `tls-client-cert-file`), so a primary with
/// `tls-auth-clients yes` admits it.
///
/// # Errors
/// As [`server_config`].
pub fn client_config(c: &TlsConfig) -> Result<Arc<ClientConfig>, String> {
    check_files(c)?;
    if c.ca_cert_file.is_empty() {
        return Err("tls-replication needs tls-ca-cert-file".into());
    }
    let chain = certs("tls-cert-file", &c.cert_file)?;
    let key = key(&c.key_file)?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots(&c.ca_cert_file)?)
        .with_client_auth_cert(chain, key)
        .map_err(|e| {
            format!(
                "tls-cert-file {} and tls-key-file {}: {e}",
                c.cert_file, c.key_file
            )
        })?;
    Ok(Arc::new(config))
}

/// One TLS connection on a non-blocking socket, driven by the event loop.
/// Every method takes the socket (`&TcpStream` or a test's in-memory
/// pipe); none blocks.
#[derive(Debug)]
pub struct Session {
    conn: Box<ServerConnection>,
    /// The peer closed (close_notify or end of stream): what rustls holds
    /// is read, then [`Session::read_into`] answers end of stream.
    eof: bool,
    /// close_notify is queued.
    closing: bool,
}

impl Session {
    /// A new server-side session (the handshake runs as bytes come).
    ///
    /// # Errors
    /// rustls refused to start one (only on a configuration it would never
    /// build).
    pub fn new(config: &Arc<ServerConfig>) -> Result<Session, rustls::Error> {
        Ok(Session {
            conn: Box::new(ServerConnection::new(config.clone())?),
            eof: false,
            closing: false,
        })
    }

    /// Reads ciphertext from `io` until it would block (readiness is
    /// edge-triggered) and appends the plaintext to `buf`, stopping once
    /// `budget` bytes were appended (the rest stays in rustls and the
    /// socket for the next call). `scratch` carries plaintext out of rustls.
    ///
    /// Returns the plaintext bytes appended (more than 0); `Ok(0)` when the
    /// peer closed and nothing is left; [`ErrorKind::WouldBlock`] when
    /// nothing was appended and the socket has no more now (a handshake
    /// step may have been taken: see [`Session::wants_write`]).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidData`]: the peer broke the protocol or failed
    /// the handshake (the alert for it waits in [`Session::wants_write`]);
    /// or the socket's error.
    pub fn read_into(
        &mut self,
        io: &mut impl Read,
        scratch: &mut [u8],
        buf: &mut bytes::BytesMut,
        budget: usize,
    ) -> std::io::Result<usize> {
        let mut n = 0;
        loop {
            // Plaintext first: rustls refuses more ciphertext while its
            // plaintext buffer is full.
            loop {
                match self.conn.reader().read(scratch) {
                    Ok(0) => {
                        self.eof = true;
                        break;
                    }
                    Ok(k) => {
                        buf.extend_from_slice(&scratch[..k]);
                        n += k;
                        if n >= budget {
                            return Ok(n);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    // Closed without close_notify: an end all the same.
                    Err(_) => {
                        self.eof = true;
                        break;
                    }
                }
            }
            if self.eof {
                return Ok(n);
            }
            match self.conn.read_tls(io) {
                Ok(0) => self.eof = true,
                Ok(_) => {
                    if let Err(e) = self.conn.process_new_packets() {
                        return Err(std::io::Error::new(ErrorKind::InvalidData, e));
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    return match n {
                        0 => Err(e),
                        n => Ok(n),
                    };
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if self.eof {
                // What rustls still holds is read at the top, then the end.
                let _ = self.conn.process_new_packets();
            }
        }
    }

    /// Whether ciphertext waits to be written (a handshake message, an
    /// alert, replies the socket did not take): the loop keeps writable
    /// interest while it does.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Whether the peer closed (close_notify or end of stream): the next
    /// [`Session::read_into`] answers `Ok(0)` once the plaintext is read.
    pub fn closed(&self) -> bool {
        self.eof
    }

    /// Whether the handshake is still running.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Encrypts as much of `out` as rustls takes and writes ciphertext to
    /// `io` until it would block. Returns how many bytes of `out` were
    /// taken (they are sent, or wait in [`Session::wants_write`]); `out`
    /// may be empty, to flush.
    ///
    /// # Errors
    /// The socket's error; [`ErrorKind::WriteZero`] when it takes nothing.
    pub fn write_from(&mut self, io: &mut impl Write, out: &[u8]) -> std::io::Result<usize> {
        let mut taken = 0;
        loop {
            let mut took = 0;
            if taken < out.len() {
                took = self.conn.writer().write(&out[taken..])?;
                taken += took;
            }
            if !self.flush(io)? || taken == out.len() {
                return Ok(taken);
            }
            if took == 0 {
                // rustls takes nothing more now (its buffer is full before
                // the handshake ends): the rest waits for the next write.
                return Ok(taken);
            }
        }
    }

    /// Writes pending ciphertext; false when the socket would block first.
    fn flush(&mut self, io: &mut impl Write) -> std::io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(io) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Before the socket closes: queues close_notify (once) and writes what
    /// the socket takes now (best effort: a closing connection does not
    /// wait).
    pub fn close(&mut self, io: &mut impl Write) {
        if !self.closing {
            self.closing = true;
            self.conn.send_close_notify();
        }
        let _ = self.flush(io);
    }

    /// The connection as a blocking stream over `tcp` (a replica's feed
    /// after PSYNC): what rustls holds (plaintext read, ciphertext not yet
    /// written) goes with it.
    ///
    /// # Errors
    /// The socket cannot be made blocking.
    pub fn into_blocking(self, tcp: TcpStream) -> std::io::Result<BlockingStream> {
        tcp.set_nonblocking(false)?;
        Ok(BlockingStream::new(
            rustls::Connection::Server(*self.conn),
            tcp,
        ))
    }
}

/// A blocking TLS stream that two threads may share (the two directions of
/// a [`relay`]). One lock holds the rustls state; a reader waits for the
/// socket without it (polls of 50 ms), so a writer is never stuck behind a
/// reader's wait.
#[derive(Debug, Clone)]
pub struct BlockingStream {
    inner: Arc<parking_lot::Mutex<rustls::Connection>>,
    tcp: Arc<TcpStream>,
}

impl BlockingStream {
    fn new(conn: rustls::Connection, tcp: TcpStream) -> BlockingStream {
        BlockingStream {
            inner: Arc::new(parking_lot::Mutex::new(conn)),
            tcp: Arc::new(tcp),
        }
    }

    /// Connects over `tcp` (blocking, with its timeouts) to the primary
    /// named `host` and completes the handshake.
    ///
    /// # Errors
    /// `host` is not a valid name, the handshake failed (a certificate the
    /// CA did not sign, a refused client certificate), or the socket's
    /// error.
    pub fn connect(
        config: &Arc<ClientConfig>,
        host: &str,
        tcp: TcpStream,
    ) -> std::io::Result<BlockingStream> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
        let mut conn = ClientConnection::new(config.clone(), name)
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
        let mut io = &tcp;
        while conn.is_handshaking() {
            conn.complete_io(&mut io)?;
        }
        Ok(BlockingStream::new(rustls::Connection::Client(conn), tcp))
    }

    /// The TCP socket under it (timeouts, shutdown).
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }
}

impl Read for BlockingStream {
    /// Reads plaintext, waiting for the socket as a blocking read would
    /// (the socket's read timeout applies: [`ErrorKind::WouldBlock`] or
    /// [`ErrorKind::TimedOut`] after it).
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let started = Instant::now();
        let limit = self.tcp.read_timeout()?;
        loop {
            {
                let mut conn = self.inner.lock();
                let got = conn.reader().read(out);
                match got {
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                // Some ciphertext, if any is there, without waiting.
                self.tcp.set_nonblocking(true)?;
                let mut io = &*self.tcp;
                let read = conn.read_tls(&mut io);
                self.tcp.set_nonblocking(false)?;
                match read {
                    Ok(0) => return Ok(0),
                    Ok(_) => {
                        conn.process_new_packets()
                            .map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))?;
                        // An alert or a key update may need an answer.
                        let _ = conn.write_tls(&mut io);
                        continue;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            if limit.is_some_and(|l| started.elapsed() >= l) {
                return Err(ErrorKind::WouldBlock.into());
            }
            wait_readable(&self.tcp, 50)?;
        }
    }
}

impl Write for BlockingStream {
    /// Encrypts all of `buf` and writes it out before returning (the
    /// socket's write timeout applies).
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut conn = self.inner.lock();
        let mut io = &*self.tcp;
        let mut taken = 0;
        // rustls buffers a bounded amount: encrypt, send, repeat.
        while taken < buf.len() || conn.wants_write() {
            let took = conn.writer().write(&buf[taken..])?;
            taken += took;
            if took == 0 && !conn.wants_write() {
                return Err(ErrorKind::WriteZero.into());
            }
            while conn.wants_write() {
                if conn.write_tls(&mut io)? == 0 {
                    return Err(ErrorKind::WriteZero.into());
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Carries `tls` to a new plain socket on the loopback interface and
/// returns that socket's other end: what is written to it goes out over
/// TLS, what comes over TLS is read from it, and either side's close closes
/// the other (with close_notify). Two threads do it, one per direction;
/// writes over TLS give up after `write_timeout` (a peer that stopped
/// reading), which closes both.
///
/// # Errors
/// The loopback pair or a thread could not be made.
pub fn relay(tls: BlockingStream, write_timeout: Duration) -> std::io::Result<TcpStream> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let near = TcpStream::connect(listener.local_addr()?)?;
    let (far, from) = listener.accept()?;
    if from != near.local_addr()? {
        // Another local process connected first: never relay to it.
        return Err(std::io::Error::other(
            "TLS relay: an unexpected loopback connection",
        ));
    }
    let _ = far.set_nodelay(true);
    let _ = near.set_nodelay(true);
    tls.tcp.set_read_timeout(None)?;
    tls.tcp.set_write_timeout(Some(write_timeout))?;
    let (mut tls_in, mut tls_out) = (tls.clone(), tls);
    let (mut far_out, mut far_in) = (far.try_clone()?, far);
    std::thread::Builder::new()
        .name("leasehold-tls-in".into())
        .spawn(move || {
            let _ = std::io::copy(&mut tls_in, &mut far_out);
            let _ = far_out.shutdown(std::net::Shutdown::Both);
            tls_in.kill();
        })?;
    std::thread::Builder::new()
        .name("leasehold-tls-out".into())
        .spawn(move || {
            let _ = std::io::copy(&mut far_in, &mut tls_out);
            tls_out.shutdown();
            let _ = far_in.shutdown(std::net::Shutdown::Both);
        })?;
    Ok(near)
}

impl BlockingStream {
    /// Shuts the socket down without the lock (a writer may hold it,
    /// blocked): the other side's reads and writes fail at once.
    pub fn kill(&self) {
        let _ = self.tcp.shutdown(std::net::Shutdown::Both);
    }

    /// Sends close_notify (best effort) and shuts the socket down.
    pub fn shutdown(&self) {
        let mut conn = self.inner.lock();
        conn.send_close_notify();
        let mut io = &*self.tcp;
        let _ = conn.write_tls(&mut io);
        let _ = self.tcp.shutdown(std::net::Shutdown::Both);
    }
}

/// Waits at most `ms` milliseconds for `tcp` to be readable.
fn wait_readable(tcp: &TcpStream, ms: i32) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut fds = libc::pollfd {
        fd: tcp.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: `fds` is one valid pollfd that outlives the call.
    let r = unsafe { libc::poll(&mut fds, 1, ms) };
    match r {
        -1 => {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                ErrorKind::Interrupted => Ok(()),
                _ => Err(e),
            }
        }
        _ => Ok(()),
    }
}

/// Most handshake-failure messages logged per second: a scanner or a
/// plain-text client on the TLS port must not flood the log.
const FAILURE_LOGS_PER_SECOND: u64 = 1;

/// Logs that the TLS connection from `peer` failed (`why`), at most
/// [`FAILURE_LOGS_PER_SECOND`] a second; the next message says how many
/// were left out meanwhile.
pub fn log_failure(peer: SocketAddr, why: &std::io::Error) {
    static START: OnceLock<Instant> = OnceLock::new();
    static LAST_SECOND: AtomicU64 = AtomicU64::new(u64::MAX);
    static LOGGED: AtomicU64 = AtomicU64::new(0);
    static SKIPPED: AtomicU64 = AtomicU64::new(0);
    let second = START.get_or_init(Instant::now).elapsed().as_secs();
    if LAST_SECOND.swap(second, Ordering::Relaxed) != second {
        LOGGED.store(0, Ordering::Relaxed);
    }
    if LOGGED.fetch_add(1, Ordering::Relaxed) >= FAILURE_LOGS_PER_SECOND {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    match SKIPPED.swap(0, Ordering::Relaxed) {
        0 => tracing::warn!("TLS connection from {peer} failed: {why}"),
        n => tracing::warn!(
            "TLS connection from {peer} failed: {why} ({n} more failures not logged)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// One direction of an in-memory socket: reads would block when it is
    /// empty, writes when it holds `cap` bytes.
    #[derive(Default)]
    struct Pipe {
        bytes: VecDeque<u8>,
        cap: usize,
    }

    impl Read for Pipe {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.bytes.is_empty() {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = out.len().min(self.bytes.len());
            for (o, b) in out.iter_mut().zip(self.bytes.drain(..n)) {
                *o = b;
            }
            Ok(n)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = self.cap.saturating_sub(self.bytes.len());
            if room == 0 {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(room);
            self.bytes.extend(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A session with `tls-auth-clients no` and a client trusting its
    /// self-signed certificate, handshaken over two pipes of `cap` bytes.
    fn pair(cap: usize) -> (Session, ClientConnection, Pipe, Pipe) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let cert = params.self_signed(&key).unwrap();
        let dir = std::env::temp_dir().join(format!("leasehold-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (cert_file, key_file) = (dir.join("c.pem"), dir.join("k.pem"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let config = TlsConfig {
            port: 1,
            cert_file: cert_file.display().to_string(),
            key_file: key_file.display().to_string(),
            auth_clients: "no".into(),
            ..TlsConfig::default()
        };
        let server = Session::new(&server_config(&config).unwrap()).unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let name = ServerName::try_from("localhost").unwrap();
        let client = ClientConnection::new(Arc::new(client), name).unwrap();
        let (mut up, mut down) = (
            Pipe {
                cap,
                ..Pipe::default()
            },
            Pipe {
                cap,
                ..Pipe::default()
            },
        );
        let (mut server, mut client) = (server, client);
        let mut scratch = [0u8; 4096];
        let mut buf = bytes::BytesMut::new();
        while client.is_handshaking() || server.is_handshaking() {
            while client.wants_write() && client.write_tls(&mut up).is_ok() {}
            let read = server.read_into(&mut up, &mut scratch, &mut buf, 1 << 20);
            assert!(
                read.as_ref()
                    .is_err_and(|e| e.kind() == ErrorKind::WouldBlock),
                "{read:?}"
            );
            server.write_from(&mut down, &[]).unwrap();
            while client.read_tls(&mut down).is_ok() {
                client.process_new_packets().unwrap();
            }
        }
        (server, client, up, down)
    }

    #[test]
    fn reads_stop_at_the_budget_and_at_would_block() {
        let (mut server, mut client, mut up, _down) = pair(usize::MAX);
        let sent: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let mut off = 0;
        while off < sent.len() {
            // rustls buffers 64 KiB of unsent records at most.
            off += client.writer().write(&sent[off..]).unwrap();
            while client.wants_write() {
                client.write_tls(&mut up).unwrap();
            }
        }
        let (mut scratch, mut buf) = ([0u8; 16384], bytes::BytesMut::new());
        let budget = 64 * 1024;
        let mut reads = Vec::new();
        loop {
            match server.read_into(&mut up, &mut scratch, &mut buf, budget) {
                Ok(n) => reads.push(n),
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::WouldBlock);
                    break;
                }
            }
        }
        assert!(
            reads[..3]
                .iter()
                .all(|&n| n >= budget && n < budget + 16384),
            "{reads:?}"
        );
        assert_eq!(reads.iter().sum::<usize>(), sent.len());
        assert_eq!(&buf[..], &sent[..]);
        // close_notify: the end of the stream, once.
        client.send_close_notify();
        client.write_tls(&mut up).unwrap();
        assert_eq!(
            server
                .read_into(&mut up, &mut scratch, &mut buf, budget)
                .unwrap(),
            0
        );
        assert!(server.closed());
    }

    #[test]
    fn a_write_the_socket_cannot_take_waits_in_the_session() {
        let (mut server, mut client, _up, mut down) = pair(32 * 1024);
        let out: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut taken = 0;
        let mut got = Vec::new();
        let mut chunk = [0u8; 16384];
        while taken < out.len() || server.wants_write() {
            taken += server.write_from(&mut down, &out[taken..]).unwrap();
            assert!(taken == out.len() || server.wants_write() || !down.bytes.is_empty());
            while client.read_tls(&mut down).is_ok() {
                client.process_new_packets().unwrap();
                while let Ok(n) = client.reader().read(&mut chunk) {
                    got.extend_from_slice(&chunk[..n]);
                }
            }
        }
        assert_eq!(got.len(), out.len());
        assert!(got == out, "every byte, in order");
    }

    #[test]
    fn bad_bytes_are_invalid_data() {
        let (mut server, _client, mut up, _down) = pair(usize::MAX);
        up.bytes.extend(b"*1\r\n$4\r\nPING\r\n");
        let (mut scratch, mut buf) = ([0u8; 4096], bytes::BytesMut::new());
        let e = server
            .read_into(&mut up, &mut scratch, &mut buf, 1024)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidData);
        assert!(buf.is_empty());
    }

    #[test]
    fn a_missing_setting_is_named() {
        let c = TlsConfig {
            port: 1,
            ..TlsConfig::default()
        };
        assert_eq!(
            server_config(&c).unwrap_err(),
            "tls-port and tls-replication need tls-cert-file and tls-key-file"
        );
    }
}
