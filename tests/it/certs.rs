//! Certificates made by the tests (a CA of their own and a leaf for `localhost`, by
//! `openssl`) and nginx serving TLS with them: shared by the `https://` tests of HTTP/1.1
//! ([`crate::tls`]) and of HTTP/2 ([`crate::h2`]).

use std::path::PathBuf;
use std::process::Command;

use crate::common::{self, Nginx};

/// A CA and a leaf certificate it signed, for `localhost` only (not `127.0.0.1`).
pub struct Certs {
    pub dir: tempfile::TempDir,
}

impl Certs {
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("leaf.pem")
    }
    pub fn key(&self) -> PathBuf {
        self.dir.path().join("leaf.key")
    }
}

/// Makes the certificates with `openssl`; `None` (after `skip_or_fail`) without it.
pub fn make_certs() -> Option<Certs> {
    if common::find_program("openssl").is_none() {
        common::skip_or_fail("openssl is not installed (Debian: apt-get install openssl)");
        return None;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let d = dir.path();
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(d)
            .output()
            .expect("running openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &[
                "req",
                "-x509",
                "-days",
                "2",
                "-subj",
                "/CN=stairbench test CA",
            ][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req", "-new", "-subj", "/CN=localhost"][..],
            &ec,
            &["-keyout", "leaf.key", "-out", "leaf.csr"],
        ]
        .concat(),
    );
    std::fs::write(
        d.join("leaf.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "leaf.ext",
        "-out",
        "leaf.pem",
    ]);
    Some(Certs { dir })
}

/// nginx with its plain port (for stub_status) and a TLS port; `extra_listen` is added to
/// the TLS port's `listen` (e.g. `http2`).
pub fn start_nginx_tls(certs: &Certs, extra_listen: &str, extra: &str) -> Option<(Nginx, u16)> {
    let tls_port = common::free_port();
    let server_extra = format!(
        "listen 127.0.0.1:{tls_port} ssl {extra_listen};
        ssl_certificate {};
        ssl_certificate_key {};
        {extra}",
        certs.cert().display(),
        certs.key().display()
    );
    let nginx = common::start_nginx_with(&server_extra)?;
    Some((nginx, tls_port))
}
