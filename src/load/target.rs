//! Target URLs: the scheme picks the protocol; each connection gets its own protocol state.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use super::protocol::{http::Http, memcache, msgr::MsgrProto, redis, Protocol};
use super::template::{self, Framing, H2Requests};
use super::tls::TlsClient;
use super::{LoadError, ProtoOptions};

/// A parsed target: where to connect and how to build each connection's protocol.
#[derive(Debug, Clone)]
pub struct Target {
    /// The resolved address.
    pub addr: SocketAddr,
    /// TLS over the connections (`https://`).
    pub tls: Option<TlsClient>,
    /// HTTP/2 (`h2c://`, `grpc://`, `grpcs://`, or `--http2`).
    pub http2: bool,
    /// gRPC unary calls (`grpc://`, `grpcs://`) over HTTP/2.
    pub grpc: bool,
    /// Source addresses the connections take round-robin (empty: the kernel's choice).
    pub sources: Vec<std::net::IpAddr>,
    kind: Kind,
    /// `--requests`, compiled for this target's protocol.
    templates: Option<Arc<template::Compiled>>,
}

/// Every URL scheme `load` (and a spec's `url`) takes: socket targets by HOST:PORT, then the
/// shared-memory ones by region NAME.
pub const SCHEMES: &[&str] = &[
    "http", "https", "h2c", "grpc", "grpcs", "redis", "memcache", "msgr", "shm", "kvd",
];

/// The schemes as a phrase for help and errors: "http, https, ... or kvd".
pub fn schemes_phrase() -> String {
    match SCHEMES.split_last() {
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A url whose shape `load` cannot use (found before any step runs).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UrlShapeError {
    /// No `://`.
    #[error(
        "{url:?}: expected SCHEME://HOST:PORT or shm://NAME, kvd://NAME; SCHEME is one of {}",
        schemes_phrase()
    )]
    NoScheme {
        /// The url as given.
        url: String,
    },
    /// A scheme `load` does not speak, with the closest one it does.
    #[error("{url:?}: unknown scheme {scheme:?}{}; use {}", .closest.as_ref().map_or(String::new(), |s| format!(" (did you mean {s:?}?)")), schemes_phrase())]
    UnknownScheme {
        /// The url as given.
        url: String,
        /// Its scheme.
        scheme: String,
        /// The nearest known scheme, if one is near.
        closest: Option<String>,
    },
    /// Nothing after `SCHEME://`.
    #[error("{url:?}: nothing after {scheme}://: expected HOST:PORT (or a NAME for shm and kvd)")]
    Empty {
        /// The url as given.
        url: String,
        /// Its scheme.
        scheme: String,
    },
}

/// Why a url's authority gives no socket address.
#[derive(Debug, thiserror::Error)]
enum ResolveError {
    /// An empty authority.
    #[error("no host")]
    NoHost,
    /// The resolver failed.
    #[error("cannot resolve {authority:?}: {source}")]
    Lookup {
        /// HOST[:PORT] as given.
        authority: String,
        /// What the resolver said.
        source: std::io::Error,
    },
    /// The resolver gave no address.
    #[error("{0:?} resolves to no address")]
    Nothing(String),
}

/// Checks a url's shape before any step runs (a spec's `url` at plan time, placeholders such
/// as `{port}` still in it): SCHEME://REST with a scheme `load` speaks, so a typo fails the
/// dry run rather than every step of the real one.
pub fn check_shape(url: &str) -> Result<(), UrlShapeError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(UrlShapeError::NoScheme { url: url.into() });
    };
    if !SCHEMES.contains(&scheme) {
        return Err(UrlShapeError::UnknownScheme {
            url: url.into(),
            scheme: scheme.into(),
            closest: crate::units::closest(scheme, SCHEMES).map(str::to_string),
        });
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Err(UrlShapeError::Empty {
            url: url.into(),
            scheme: scheme.into(),
        });
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Kind {
    Http { host: String, path: String },
    Redis(redis::KeySpace),
    Memcache(redis::KeySpace),
    Msgr,
}

impl Target {
    /// Parses and resolves `url`, checking the options its protocol uses.
    pub fn parse(url: &str, opts: &ProtoOptions) -> Result<Target, LoadError> {
        let bad = |why: String| LoadError::BadInput(format!("bad URL {url:?}: {why}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| {
            bad(format!(
                "expected SCHEME://HOST:PORT or shm://NAME, kvd://NAME; SCHEME is one of {}",
                schemes_phrase()
            ))
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let default_port = match scheme {
            "http" => 80,
            "https" => 443,
            "h2c" | "grpc" => 80,
            "grpcs" => 443,
            "redis" => 6379,
            "memcache" => 11211,
            "msgr" => 9000,
            other => {
                return Err(bad(format!(
                    "unknown scheme {other:?}; use {}",
                    schemes_phrase()
                )))
            }
        };
        let addr = resolve(authority, default_port).map_err(|e| bad(e.to_string()))?;
        let kind = match scheme {
            "grpc" | "grpcs" => {
                super::protocol::grpc::check_path(path).map_err(bad)?;
                Kind::Http {
                    host: authority.to_string(),
                    path: path.to_string(),
                }
            }
            "http" | "https" | "h2c" => Kind::Http {
                host: authority.to_string(),
                path: path.to_string(),
            },
            "redis" => Kind::Redis(key_space(opts)?),
            "memcache" => Kind::Memcache(key_space(opts)?),
            _ => Kind::Msgr,
        };
        check_options(opts)?;
        if opts.preload && !matches!(kind, Kind::Redis(_) | Kind::Memcache(_)) {
            return Err(LoadError::BadInput(
                "--preload works with redis:// and memcache:// targets only".into(),
            ));
        }
        let tls = match scheme {
            // HTTP/1.1 offered too with --http2: a server without h2 then says so by choosing
            // it, and the probe's error can name what the server speaks.
            "https" if opts.http2 => Some(TlsClient::new(
                host_of(authority),
                &[b"h2", b"http/1.1"],
                &opts.tls,
            )?),
            "https" => Some(TlsClient::new(
                host_of(authority),
                &[b"http/1.1"],
                &opts.tls,
            )?),
            "grpcs" => Some(TlsClient::new(host_of(authority), &[b"h2"], &opts.tls)?),
            _ => {
                super::tls::check_unused(&opts.tls)?;
                None
            }
        };
        if opts.new_connection_per_request && !matches!(kind, Kind::Http { .. }) {
            return Err(LoadError::BadInput(
                "--new-connection-per-request works with http:// and https:// targets only".into(),
            ));
        }
        let grpc = matches!(scheme, "grpc" | "grpcs");
        check_grpc_options(grpc, opts)?;
        let http2 = matches!(scheme, "h2c" | "grpc" | "grpcs") || opts.http2;
        let templates = templates(opts, &kind, http2.then_some(scheme))?;
        if http2 && !matches!(kind, Kind::Http { .. }) {
            return Err(LoadError::BadInput(
                "--http2 works with http:// and https:// targets only".into(),
            ));
        }
        if http2 && opts.new_connection_per_request {
            return Err(LoadError::BadInput(
                "--new-connection-per-request works with HTTP/1.1 only".into(),
            ));
        }
        Ok(Target {
            addr,
            tls,
            http2,
            grpc,
            sources: Vec::new(),
            kind,
            templates,
        })
    }

    /// The key space of a redis or memcached target.
    pub fn redis_keys(&self) -> Option<&redis::KeySpace> {
        match &self.kind {
            Kind::Redis(space) | Kind::Memcache(space) => Some(space),
            _ => None,
        }
    }

    /// A connection of this key-value target that stores the key space's keys (`--preload`).
    pub fn preloader(&self, opts: &ProtoOptions) -> Option<Box<dyn super::protocol::Preload>> {
        match &self.kind {
            Kind::Redis(space) => Some(Box::new(redis::Redis::new(
                space.clone(),
                0.0,
                opts.value_size,
                0,
            ))),
            Kind::Memcache(space) => Some(Box::new(memcache::Memcache::new(
                space.clone(),
                0.0,
                opts.value_size,
                0,
                opts.memcache_commands,
            ))),
            _ => None,
        }
    }

    /// HTTP/2: the request every stream sends, and its body.
    pub fn http2_request(&self, opts: &ProtoOptions) -> (http::Request<()>, Option<bytes::Bytes>) {
        let Kind::Http { host, path } = &self.kind else {
            unreachable!("HTTP/2 is checked to be HTTP by Target::parse");
        };
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let method = if self.grpc {
            "POST"
        } else {
            opts.method.as_str()
        };
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{scheme}://{host}{path}"));
        if self.grpc {
            for (name, value) in super::protocol::grpc::HEADERS {
                req = req.header(name, value);
            }
        }
        for h in &opts.headers {
            let Some((name, value)) = h.split_once(':') else {
                continue;
            };
            let name = name.trim();
            // Connection-specific headers are forbidden in HTTP/2; the host is :authority.
            if template::is_connection_specific(name.as_bytes()) {
                continue;
            }
            req = match self.grpc {
                true => req.header(
                    name,
                    super::protocol::grpc::metadata_value(name, value.trim()),
                ),
                false => req.header(name, value.trim()),
            };
        }
        let per_call = opts.grpc_stream.map_or(1, |s| s.messages_per_call);
        let body = match self.grpc {
            true => Some(bytes::Bytes::from(
                crate::wire::grpc::frame(opts.body_file.as_deref().unwrap_or_default())
                    .repeat(per_call as usize),
            )),
            false => opts.body.as_ref().map(|b| bytes::Bytes::from(b.clone())),
        };
        // A message made per call has no one length (gRPC needs none).
        if let (Some(b), false) = (&body, self.grpc && opts.grpc_calls.is_some()) {
            req = req.header("content-length", b.len());
        }
        let req = req.body(()).unwrap_or_else(|_| http::Request::new(()));
        (req, body)
    }

    /// HTTP/2 with `--requests`: connection number `index`'s requests.
    pub fn http2_templates(&self, index: usize, opts: &ProtoOptions) -> Option<H2Requests> {
        let t = self.templates.as_ref()?;
        Some(t.h2_connection(index, connection_seed(index, opts)))
    }

    /// The protocol state of connection number `index`.
    pub fn connection(&self, index: usize, opts: &ProtoOptions) -> Box<dyn Protocol> {
        let seed = connection_seed(index, opts);
        if let Some(t) = &self.templates {
            return t.connection(index, seed);
        }
        match &self.kind {
            Kind::Http { host, path } => {
                let headers = http_headers(opts);
                Box::new(Http::new(
                    &opts.method,
                    host,
                    path,
                    &headers,
                    opts.body.as_deref(),
                ))
            }
            Kind::Redis(space) => Box::new(redis::Redis::new(
                space.clone(),
                opts.read_ratio,
                opts.value_size,
                seed,
            )),
            Kind::Memcache(space) => Box::new(memcache::Memcache::new(
                space.clone(),
                opts.read_ratio,
                opts.value_size,
                seed,
                opts.memcache_commands,
            )),
            Kind::Msgr => Box::new(MsgrProto::new(opts.msg_size)),
        }
    }
}

/// The key space `--keys` and `--distribution` describe.
fn key_space(opts: &ProtoOptions) -> Result<redis::KeySpace, LoadError> {
    redis::KeySpace::new(opts.keys, opts.distribution)
        .map_err(|e| LoadError::BadInput(e.to_string()))
}

/// The seed of connection number `index`'s generator.
pub(super) fn connection_seed(index: usize, opts: &ProtoOptions) -> u64 {
    opts.seed.wrapping_mul(1000).wrapping_add(index as u64)
}

/// The host of `host:port`, `[v6]:port`, `host` or `[v6]`.
fn host_of(authority: &str) -> &str {
    match authority.rsplit_once(':') {
        Some((host, port)) if !port.ends_with(']') && !host.is_empty() && host != "[" => {
            if host.starts_with('[') || !host.contains(':') {
                host
            } else {
                authority
            }
        }
        _ => authority,
    }
}

/// The headers of every HTTP request: the user's, plus `Connection: close` when each
/// request gets its own connection.
fn http_headers(opts: &ProtoOptions) -> Vec<String> {
    let mut headers = opts.headers.clone();
    if opts.new_connection_per_request {
        headers.push("Connection: close".into());
    }
    headers
}

/// The request file compiled for the target's protocol.
/// `http2_scheme`: the URL's scheme when the target speaks HTTP/2.
fn templates(
    opts: &ProtoOptions,
    kind: &Kind,
    http2_scheme: Option<&str>,
) -> Result<Option<Arc<template::Compiled>>, LoadError> {
    let Some(file) = &opts.requests else {
        return Ok(None);
    };
    let headers = http_headers(opts);
    let framing = match (kind, http2_scheme) {
        (Kind::Http { host, .. }, Some(scheme)) => Framing::Http2 {
            scheme: if scheme == "https" { "https" } else { "http" },
            authority: host,
            headers: &headers,
        },
        (Kind::Http { host, .. }, None) => Framing::Http {
            host,
            headers: &headers,
        },
        (Kind::Redis(_), _) => Framing::Resp,
        (Kind::Msgr | Kind::Memcache(_), _) => {
            return Err(LoadError::BadInput(
                "--requests works with http:// and redis:// targets only".into(),
            ))
        }
    };
    template::compile(file, opts.order, framing)
        .map(|c| Some(Arc::new(c)))
        .map_err(|e| LoadError::BadInput(e.to_string()))
}

fn resolve(authority: &str, default_port: u16) -> Result<SocketAddr, ResolveError> {
    if authority.is_empty() {
        return Err(ResolveError::NoHost);
    }
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        && !authority.ends_with(']')
    {
        authority.to_string()
    } else {
        format!("{authority}:{default_port}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|source| ResolveError::Lookup {
            authority: authority.into(),
            source,
        })?
        .next()
        .ok_or_else(|| ResolveError::Nothing(authority.into()))
}

/// gRPC's message is `--body-file`'s bytes (serialized protobuf); the method, the text body
/// and request files are HTTP's.
fn check_grpc_options(grpc: bool, opts: &ProtoOptions) -> Result<(), LoadError> {
    let refuse = |s: &str| Err(LoadError::BadInput(s.to_string()));
    if !grpc {
        return match opts.body_file.is_some() {
            true => refuse("--body-file (a gRPC message) works with grpc:// and grpcs:// targets only: use --body for HTTP"),
            false => Ok(()),
        };
    }
    if opts.body.is_some() {
        return refuse(
            "gRPC's request message comes from --body-file FILE (serialized protobuf), not --body",
        );
    }
    if opts.requests.is_some() {
        return refuse("--requests works with http:// and redis:// targets only: gRPC's message comes from --body-file");
    }
    if opts.method != "GET" && opts.method != "POST" {
        return refuse("gRPC calls are POSTs: drop --method");
    }
    Ok(())
}

fn check_options(opts: &ProtoOptions) -> Result<(), LoadError> {
    if !(0.0..=1.0).contains(&opts.read_ratio) {
        return Err(LoadError::BadInput(format!(
            "--read-ratio must be between 0 and 1, got {}",
            opts.read_ratio
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_and_ports() {
        let o = ProtoOptions::default();
        let t = Target::parse("http://127.0.0.1:8080/a/b", &o).unwrap();
        assert_eq!(t.addr.port(), 8080);
        assert!(matches!(&t.kind, Kind::Http { path, .. } if path == "/a/b"));
        assert_eq!(
            Target::parse("redis://127.0.0.1", &o).unwrap().addr.port(),
            6379
        );
        assert_eq!(
            Target::parse("memcache://127.0.0.1", &o)
                .unwrap()
                .addr
                .port(),
            11211
        );
        assert_eq!(Target::parse("msgr://[::1]:7", &o).unwrap().addr.port(), 7);
        let https = Target::parse("https://127.0.0.1/", &o).unwrap();
        assert_eq!(https.addr.port(), 443);
        assert!(https.tls.is_some());
        assert!(Target::parse("http://127.0.0.1/", &o)
            .unwrap()
            .tls
            .is_none());
    }

    #[test]
    fn hosts_without_ports() {
        assert_eq!(host_of("localhost:8443"), "localhost");
        assert_eq!(host_of("localhost"), "localhost");
        assert_eq!(host_of("[::1]:443"), "[::1]");
        assert_eq!(host_of("[::1]"), "[::1]");
    }

    #[test]
    fn bad_urls_say_why() {
        let o = ProtoOptions::default();
        let msg = |u: &str| Target::parse(u, &o).unwrap_err().to_string();
        assert!(msg("127.0.0.1:80").contains("expected SCHEME://"));
        assert!(msg("ftp://127.0.0.1").contains("unknown scheme \"ftp\""));
        assert!(msg("ftp://127.0.0.1").contains("shm"));
        assert!(msg("http://").contains("no host"));
    }

    #[test]
    fn shapes_are_checked_before_any_step() {
        assert!(check_shape("http://127.0.0.1:{port}/page.html").is_ok());
        assert!(check_shape("kvd://kv").is_ok());
        let e = check_shape("htp://127.0.0.1:{port}/")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown scheme \"htp\" (did you mean \"http\"?)"),
            "{e}"
        );
        assert!(check_shape("127.0.0.1:8080")
            .unwrap_err()
            .to_string()
            .contains("expected SCHEME://"));
        assert!(check_shape("http://")
            .unwrap_err()
            .to_string()
            .contains("nothing after http://"));
    }
}
