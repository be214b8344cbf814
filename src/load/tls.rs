//! TLS for `https://` targets, with rustls (no OpenSSL to build against).
//!
//! One [`TlsClient`] per load: the rustls configuration (roots, ALPN, resumption) shared by
//! every connection, and the server name the certificate must match (sent as SNI when it is
//! a DNS name). [`probe`] makes one handshake before any load starts, so a certificate that
//! does not verify is a clear error naming the problem, not a load of failed connections.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore};

use super::LoadError;

/// The TLS options of `stairbench load`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsOptions {
    /// Accept any server certificate (self-signed, expired, another name).
    pub insecure: bool,
    /// Verify the server's certificate against the CA certificates of this PEM file instead
    /// of the system's roots.
    pub cacert: Option<PathBuf>,
    /// Resume TLS sessions on reconnects (an abbreviated handshake); off, every connection
    /// makes a full handshake.
    pub resume: bool,
}

/// What every TLS connection of a load shares.
#[derive(Debug, Clone)]
pub struct TlsClient {
    config: Arc<ClientConfig>,
    server_name: ServerName<'static>,
    /// The host the certificate must match, as the URL gives it.
    host: String,
}

impl TlsClient {
    /// The client for `host` (the URL's host, without port), offering `alpn` protocols.
    pub fn new(host: &str, alpn: &[&[u8]], opts: &TlsOptions) -> Result<TlsClient, LoadError> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let server_name = ServerName::try_from(bare.to_string()).map_err(|_| {
            LoadError::BadInput(format!(
                "bad URL host {host:?}: not a DNS name or IP address TLS can verify"
            ))
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| LoadError::BadInput(format!("TLS configuration: {e}")))?;
        let mut config = if opts.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(roots(opts.cacert.as_deref())?)
                .with_no_client_auth()
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        if !opts.resume {
            config.resumption = Resumption::disabled();
        }
        Ok(TlsClient {
            config: Arc::new(config),
            server_name,
            host: bare.to_string(),
        })
    }

    /// A new client-side TLS session (nothing sent yet).
    pub fn session(&self) -> io::Result<ClientConnection> {
        ClientConnection::new(self.config.clone(), self.server_name.clone())
            .map_err(io::Error::other)
    }

    /// The host the certificate must match, as the URL gives it.
    pub fn host(&self) -> &str {
        &self.host
    }
}

/// The roots certificates are verified against: `--cacert`'s, else the system's.
fn roots(cacert: Option<&Path>) -> Result<RootCertStore, LoadError> {
    let mut store = RootCertStore::empty();
    let Some(path) = cacert else {
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = store.add_parsable_certificates(found.certs);
        if added == 0 {
            return Err(LoadError::BadInput(
                "no system CA certificates found to verify the server with: give --cacert FILE, or --insecure".into(),
            ));
        }
        return Ok(store);
    };
    let bad = |why: String| LoadError::BadInput(format!("--cacert {}: {why}", path.display()));
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(pem_problem(e)))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(pem_problem(e)))?;
    if certs.is_empty() {
        return Err(bad(
            "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
        ));
    }
    for cert in certs {
        store
            .add(cert)
            .map_err(|e| bad(format!("not a usable CA certificate: {e}")))?;
    }
    Ok(store)
}

fn pem_problem(e: rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::Io(io) => io.to_string(),
        other => format!("not a PEM file ({other:?})"),
    }
}

/// `--insecure`: any certificate is accepted; the handshake's signatures are still checked
/// (the server must hold the key of the certificate it sent).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// One blocking handshake with `addr` before the load: an unreachable server is a
/// [`LoadError::Connect`], a failed handshake (a certificate that does not verify, no
/// protocol in common) a [`LoadError::BadInput`] saying what failed. Returns the protocol the
/// server chose by ALPN, if any.
pub fn probe(
    addr: SocketAddr,
    tls: &TlsClient,
    timeout: Duration,
) -> Result<Option<Vec<u8>>, LoadError> {
    let connect_error = |error| LoadError::Connect {
        addr: addr.to_string(),
        error,
    };
    let mut sock = TcpStream::connect_timeout(&addr, timeout).map_err(connect_error)?;
    sock.set_read_timeout(Some(timeout))
        .and_then(|()| sock.set_write_timeout(Some(timeout)))
        .map_err(connect_error)?;
    // Its session is not kept: with --tls-resume, the load's first connections would
    // otherwise resume it rather than make the full handshakes they would without a probe.
    let mut config = (*tls.config).clone();
    config.resumption = Resumption::disabled();
    let mut session = ClientConnection::new(Arc::new(config), tls.server_name.clone())
        .map_err(|e| connect_error(io::Error::other(e)))?;
    while session.is_handshaking() {
        if let Err(e) = session.complete_io(&mut sock) {
            return Err(handshake_failed(addr, tls, &e));
        }
    }
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    session.send_close_notify();
    let _ = session.write_tls(&mut sock);
    let _ = sock.flush();
    let _ = sock.read(&mut [0u8; 1]);
    Ok(alpn)
}

/// The sentence for a handshake that failed: what rustls found, and what to do about it.
fn handshake_failed(addr: SocketAddr, tls: &TlsClient, e: &io::Error) -> LoadError {
    let rustls_error = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let advice = match rustls_error {
        Some(rustls::Error::InvalidCertificate(_)) => {
            ": give the CA that signed it with --cacert FILE, or --insecure to accept any certificate"
        }
        Some(rustls::Error::NoApplicationProtocol) => ": the server offers none of the protocols asked for by ALPN",
        Some(rustls::Error::InvalidMessage(_)) => ": does it speak TLS on this port?",
        _ => "",
    };
    let what = match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            "the server closed the connection (does it speak TLS on this port?)".to_string()
        }
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            "no answer (does it speak TLS on this port?)".to_string()
        }
        _ => e.to_string(),
    };
    LoadError::BadInput(format!(
        "TLS handshake with {} ({addr}) failed: {what}{advice}",
        tls.host
    ))
}

/// Refuses TLS options given for a target without TLS (they would be silently ignored).
pub fn check_unused(opts: &TlsOptions) -> Result<(), LoadError> {
    if *opts != TlsOptions::default() {
        return Err(LoadError::BadInput(
            "--insecure, --cacert and --tls-resume work with https:// targets only".into(),
        ));
    }
    Ok(())
}

/// Whether `e` (from a TLS connection) is a TLS protocol failure rather than a socket's.
pub fn is_tls_error(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_cacert_files_say_what_is_wrong() {
        let opts = |p: &str| TlsOptions {
            cacert: Some(PathBuf::from(p)),
            ..TlsOptions::default()
        };
        let err = |p: &str| {
            TlsClient::new("localhost", &[], &opts(p))
                .unwrap_err()
                .to_string()
        };
        let missing = err("/nonexistent/ca.pem");
        assert!(
            missing.starts_with("--cacert /nonexistent/ca.pem: "),
            "{missing}"
        );
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let msg = err(empty.to_str().unwrap());
        assert!(msg.contains("no PEM certificate"), "{msg}");
    }

    #[test]
    fn hosts_become_server_names() {
        let opts = TlsOptions {
            insecure: true,
            ..TlsOptions::default()
        };
        assert!(TlsClient::new("[::1]", &[], &opts).is_ok());
        assert!(TlsClient::new("example.com", &[b"h2"], &opts).is_ok());
        assert!(TlsClient::new("bad host", &[], &opts).is_err());
    }
}
