//! TLS pieces shared by the process tests (`tls.rs`, `metrics.rs`): the
//! PEM files of a CA, a server and a client certificate (rcgen), and a
//! blocking RESP client over rustls.

#![allow(dead_code)] // each test file uses a part

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use leasehold_protocol::{decode_reply, encode_request, Reply};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// The PEM files a test writes: a CA, a server certificate for localhost
/// and 127.0.0.1 and a client certificate, both signed by the CA.
pub struct Pki {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // Distinct names: OpenSSL (redis-cli) takes a leaf named like its
        // issuer for a self-signed certificate.
        ca.distinguished_name = DistinguishedName::new();
        ca.distinguished_name
            .push(DnType::CommonName, "Leasehold test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let leaf = |names: &[&str], usage: &[ExtendedKeyUsagePurpose]| {
            let cn = names[0];
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let mut p = CertificateParams::new(names).unwrap();
            p.extended_key_usages = usage.to_vec();
            p.distinguished_name = DistinguishedName::new();
            p.distinguished_name.push(DnType::CommonName, cn);
            let key = KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, &ca).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        // The server's certificate is a replica's client certificate too
        // (tls-replication), as in Redis without tls-client-cert-file.
        let both = [
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let (cert, key) = leaf(&["localhost", "127.0.0.1"], &both);
        let (client_cert, client_key) = leaf(&["client"], &[ExtendedKeyUsagePurpose::ClientAuth]);
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        Pki {
            ca: write("ca.crt", &ca.pem()),
            cert: write("server.crt", &cert),
            key: write("server.key", &key),
            client_cert: write("client.crt", &client_cert),
            client_key: write("client.key", &client_key),
        }
    }

    /// The server's TLS flags: `tls-port`, its files, `tls-auth-clients`.
    pub fn flags(&self, tls_port: u16, auth: &str) -> Vec<String> {
        let p = |p: &PathBuf| p.display().to_string();
        let mut flags = vec!["--tls-port".into(), tls_port.to_string()];
        flags.extend(["--tls-cert-file".into(), p(&self.cert)]);
        flags.extend(["--tls-key-file".into(), p(&self.key)]);
        flags.extend(["--tls-auth-clients".into(), auth.into()]);
        if auth != "no" {
            flags.extend(["--tls-ca-cert-file".into(), p(&self.ca)]);
        }
        flags
    }

    /// A rustls client configuration trusting the CA, showing the client
    /// certificate when `with_cert`.
    pub fn client(&self, with_cert: bool) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&self.ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match with_cert {
            true => {
                let certs = CertificateDer::pem_file_iter(&self.client_cert)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let key = PrivateKeyDer::from_pem_file(&self.client_key).unwrap();
                builder.with_client_auth_cert(certs, key).unwrap()
            }
            false => builder.with_no_client_auth(),
        };
        Arc::new(config)
    }
}

/// A blocking RESP connection over TLS (5 s read timeout, 10 s write
/// timeout).
pub struct TlsConn {
    s: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    buf: BytesMut,
}

impl TlsConn {
    pub fn open(config: &Arc<rustls::ClientConfig>, port: u16) -> std::io::Result<TlsConn> {
        let tcp = TcpStream::connect(("127.0.0.1", port))?;
        tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
        tcp.set_write_timeout(Some(Duration::from_secs(10)))?;
        let name = ServerName::try_from("localhost").unwrap();
        let conn =
            rustls::ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
        let mut s = rustls::StreamOwned::new(conn, tcp);
        // The handshake now, so that a refused certificate shows here.
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(TlsConn {
            s,
            buf: BytesMut::new(),
        })
    }

    pub fn call(&mut self, args: &[&str]) -> std::io::Result<Reply> {
        Ok(self.pipeline(&[args])?.remove(0))
    }

    pub fn pipeline(&mut self, requests: &[&[&str]]) -> std::io::Result<Vec<Reply>> {
        let mut out = BytesMut::new();
        for args in requests {
            encode_request(args, &mut out);
        }
        self.s.write_all(&out)?;
        self.s.flush()?;
        let mut replies = Vec::with_capacity(requests.len());
        let mut chunk = vec![0u8; 64 * 1024];
        while replies.len() < requests.len() {
            if let Ok(Some(r)) = decode_reply(&mut self.buf) {
                replies.push(r);
                continue;
            }
            let n = self.s.read(&mut chunk)?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
        Ok(replies)
    }
}
