//! The `[hosts]` table: `name = "ssh://user@address:port"` (or another engine's URL, see
//! `engine::ENGINES`), or a table with `url`, `identity_file`, `workdir` and
//! `known_hosts_file`. Every entry is checked when the spec is read, so a bad address or an
//! unreadable key is refused before anything starts.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Where stairbench works on a host when the spec names no directory (relative to the remote
/// user's home directory).
pub const DEFAULT_WORKDIR: &str = ".stairbench";

/// One host of the `[hosts]` table as written in the spec: a bare URL or a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum HostEntry {
    /// `name = "ssh://user@address:port"`.
    Url(String),
    /// `name = { url = "ssh://...", identity_file = "...", workdir = "..." }`.
    Table(HostTable),
}

/// The table form of a `[hosts]` entry; an unknown key is an error, not a silent default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostTable {
    /// The `ssh://` URL.
    pub url: String,
    /// The private key ssh should use (`ssh -i`).
    #[serde(default)]
    pub identity_file: Option<PathBuf>,
    /// Where stairbench keeps its binary and files on the host.
    #[serde(default)]
    pub workdir: Option<PathBuf>,
    /// A known_hosts file to use instead of the user's own.
    #[serde(default)]
    pub known_hosts_file: Option<PathBuf>,
}

/// By hand rather than `untagged`, so a bad table says which key is wrong.
impl<'de> Deserialize<'de> for HostEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;
        impl<'de> serde::de::Visitor<'de> for EntryVisitor {
            type Value = HostEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an \"ssh://user@address:port\" string or a table with url")
            }
            fn visit_str<E: serde::de::Error>(self, url: &str) -> Result<HostEntry, E> {
                Ok(HostEntry::Url(url.into()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<HostEntry, A::Error> {
                let de = serde::de::value::MapAccessDeserializer::new(map);
                HostTable::deserialize(de).map(HostEntry::Table)
            }
        }
        deserializer.deserialize_any(EntryVisitor)
    }
}

/// A host of the `[hosts]` table, checked and ready to use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSpec {
    /// The host's name in the spec's `[hosts]` table.
    pub name: String,
    /// Its URL's scheme, which picks the engine that reaches it (`ssh`, `local`).
    pub scheme: String,
    /// The remote user; `None` lets ssh choose (the local user, or ~/.ssh/config).
    pub user: Option<String>,
    /// A host name or an IP address (IPv6 without brackets).
    pub address: String,
    /// The sshd port (22 when the URL gives none).
    pub port: u16,
    /// The private key ssh should use.
    pub identity_file: Option<PathBuf>,
    /// Where stairbench keeps its binary and files there; relative paths are under the remote
    /// user's home directory.
    pub workdir: PathBuf,
    /// A known_hosts file to use instead of the user's own (new keys are added to it).
    pub known_hosts_file: Option<PathBuf>,
    /// The engine's own name for the host when it is not the address (a Slurm node's name;
    /// its address is the node's `NodeAddr`).
    #[serde(default)]
    pub node: Option<String>,
}

/// A `[hosts]` entry or host reference that cannot be used.
#[derive(Debug, Error)]
pub enum HostError {
    /// The URL is not one an engine reads (`ssh://[user@]address[:port]`, ...).
    #[error("host {name:?}: bad address {url:?}: {why}")]
    BadAddress {
        name: String,
        url: String,
        why: String,
    },
    /// The identity file cannot be opened by this user.
    #[error("host {name:?}: cannot read identity file {}: {error} (check the path and its permissions)", path.display())]
    Identity {
        name: String,
        path: PathBuf,
        error: std::io::Error,
    },
    /// The working directory holds characters a remote shell or scp would mangle.
    #[error("host {name:?}: working directory {path:?}: {why}")]
    BadWorkdir {
        name: String,
        path: PathBuf,
        why: String,
    },
    /// A target or client group names a host the `[hosts]` table does not have.
    #[error("{referrer} names host {name:?}, which the [hosts] table does not define (defined: {})", list_or_none(.known))]
    UnknownHost {
        name: String,
        referrer: String,
        known: Vec<String>,
    },
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

impl HostSpec {
    /// Reads one `[hosts]` entry: parses the URL, checks the identity file can be read and the
    /// working directory is usable.
    pub fn from_entry(name: &str, entry: &HostEntry) -> Result<HostSpec, HostError> {
        let (url, identity_file, workdir, known_hosts_file) = match entry {
            HostEntry::Url(url) => (url, None, None, None),
            HostEntry::Table(t) => (
                &t.url,
                t.identity_file.as_deref(),
                t.workdir.as_deref(),
                t.known_hosts_file.as_deref(),
            ),
        };
        let mut spec = HostSpec::parse(name, url)?;
        spec.workdir = workdir.map_or(spec.workdir, Path::to_path_buf);
        check_workdir(name, &spec.workdir)?;
        if let Some(path) = identity_file {
            check_identity(name, path)?;
        }
        spec.identity_file = identity_file.map(Path::to_path_buf);
        spec.known_hosts_file = known_hosts_file.map(Path::to_path_buf);
        Ok(spec)
    }

    /// Reads a host's URL with the engine its scheme names (`engine::ENGINES`): a spec with
    /// the default working directory and no identity file.
    pub fn parse(name: &str, url: &str) -> Result<HostSpec, HostError> {
        let scheme = url.split_once("://").map(|(s, _)| s);
        match scheme.and_then(super::kind) {
            Some(kind) => (kind.parse)(name, url, &url[kind.scheme.len() + 3..]),
            None => Err(HostError::BadAddress {
                name: name.into(),
                url: url.into(),
                why: format!(
                    "it does not start with {} (write it as ssh://user@address:port)",
                    super::schemes()
                ),
            }),
        }
    }

    /// `user@address` (IPv6 in brackets when `bracket_ipv6`, as scp wants it).
    pub fn destination(&self, bracket_ipv6: bool) -> String {
        let address = if bracket_ipv6 && self.address.contains(':') {
            format!("[{}]", self.address)
        } else {
            self.address.clone()
        };
        match &self.user {
            Some(user) => format!("{user}@{address}"),
            None => address,
        }
    }

    /// The URL this spec was read from, for messages.
    pub fn url(&self) -> String {
        match self.scheme.as_str() {
            "ssh" => format!("ssh://{}:{}", self.destination(true), self.port),
            scheme => match &self.node {
                Some(node) => format!("{scheme}://{node}"),
                None => format!("{scheme}://{}", self.destination(true)),
            },
        }
    }
}

/// Reads `ssh://[user@]address[:port]` (IPv6 in brackets; `rest` is what follows `ssh://`).
pub fn parse_ssh(name: &str, url: &str, rest: &str) -> Result<HostSpec, HostError> {
    let bad = |why: &str| HostError::BadAddress {
        name: name.into(),
        url: url.into(),
        why: format!("{why} (write it as ssh://user@address:port)"),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains('/') {
        return Err(bad("a path is not allowed; give the directory as workdir"));
    }
    let (user, hostport) = match rest.rsplit_once('@') {
        Some((user, hp)) => (Some(user), hp),
        None => (None, rest),
    };
    if let Some(user) = user {
        check_user(user).map_err(bad)?;
    }
    let (address, port) = split_host_port(hostport).map_err(bad)?;
    Ok(HostSpec {
        name: name.into(),
        scheme: "ssh".into(),
        user: user.map(str::to_owned),
        address,
        port,
        identity_file: None,
        workdir: PathBuf::from(DEFAULT_WORKDIR),
        known_hosts_file: None,
        node: None,
    })
}

/// Reads a whole `[hosts]` table; the first bad entry is the error.
pub fn parse_hosts(
    table: &BTreeMap<String, HostEntry>,
) -> Result<BTreeMap<String, HostSpec>, HostError> {
    table
        .iter()
        .map(|(name, entry)| Ok((name.clone(), HostSpec::from_entry(name, entry)?)))
        .collect()
}

/// Checks that every referenced host is in the table. `referenced` pairs a host name with who
/// names it (e.g. `target "nginx"`), so the error can say where to look.
pub fn validate_hosts<'a>(
    table: &BTreeMap<String, HostSpec>,
    referenced: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), HostError> {
    for (name, referrer) in referenced {
        if !table.contains_key(name) {
            return Err(HostError::UnknownHost {
                name: name.into(),
                referrer: referrer.into(),
                known: table.keys().cloned().collect(),
            });
        }
    }
    Ok(())
}

fn check_user(user: &str) -> Result<(), &'static str> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if user.is_empty() {
        Err("the user before @ is empty")
    } else if !user.chars().all(ok) || user.starts_with('-') {
        Err("the user may hold only letters, digits, '.', '_' and '-'")
    } else {
        Ok(())
    }
}

fn split_host_port(hostport: &str) -> Result<(String, u16), &'static str> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address opened with [ is not closed with ]")?;
        host.parse::<std::net::Ipv6Addr>()
            .map_err(|_| "the text in brackets is not an IPv6 address")?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("expected :port after ]")?),
        };
        (host, port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if !host.contains(':') {
        check_hostname(host)?;
    }
    let port = match port {
        None => 22,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err("the port is not a number from 1 to 65535"),
        },
    };
    Ok((host.to_owned(), port))
}

fn check_hostname(host: &str) -> Result<(), &'static str> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if host.is_empty() {
        Err("the address is empty")
    } else if !host.chars().all(ok) || host.starts_with(['-', '.']) {
        Err("the address may hold only letters, digits, '.', '-' and '_'")
    } else {
        Ok(())
    }
}

fn check_identity(name: &str, path: &Path) -> Result<(), HostError> {
    let fail = |error| HostError::Identity {
        name: name.into(),
        path: path.into(),
        error,
    };
    let meta = std::fs::metadata(path).map_err(fail)?;
    if meta.is_dir() {
        return Err(fail(std::io::Error::other("it is a directory")));
    }
    File::open(path).map(drop).map_err(fail)
}

fn check_workdir(name: &str, path: &Path) -> Result<(), HostError> {
    let text = path.to_string_lossy();
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '+');
    let why = if text.is_empty() {
        Some("it is empty")
    } else if !text.chars().all(ok) {
        Some("use only letters, digits and . _ - / + (no spaces, quotes or ~; relative paths are under the home directory)")
    } else if text.starts_with('-') {
        Some("it must not start with '-'")
    } else {
        None
    };
    match why {
        Some(why) => Err(HostError::BadWorkdir {
            name: name.into(),
            path: path.into(),
            why: why.into(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_url() {
        let h = HostSpec::parse("a", "ssh://bench@10.0.0.2:2222").unwrap();
        assert_eq!(h.user.as_deref(), Some("bench"));
        assert_eq!(h.address, "10.0.0.2");
        assert_eq!(h.port, 2222);
        assert_eq!(h.workdir, PathBuf::from(DEFAULT_WORKDIR));
        assert_eq!(h.url(), "ssh://bench@10.0.0.2:2222");
    }

    #[test]
    fn defaults_and_ipv6() {
        let h = HostSpec::parse("a", "ssh://node-1.lab").unwrap();
        assert_eq!((h.user, h.port), (None, 22));
        let h = HostSpec::parse("b", "ssh://root@[fd00::2]:22/").unwrap();
        assert_eq!(h.address, "fd00::2");
        assert_eq!(h.destination(true), "root@[fd00::2]");
        assert_eq!(h.destination(false), "root@fd00::2");
    }

    #[test]
    fn bad_addresses_say_why() {
        for (url, why) in [
            ("http://a:22", "ssh://"),
            ("ssh://", "empty"),
            ("ssh://a:0", "port"),
            ("ssh://a:70000", "port"),
            ("ssh://a:x", "port"),
            ("ssh://@a", "user"),
            ("ssh://a b", "address may hold"),
            ("ssh://-oProxyCommand=x", "address may hold"),
            ("ssh://a/tmp", "path"),
            ("ssh://[fd00::2", "closed"),
            ("ssh://[nope]", "IPv6"),
        ] {
            let err = HostSpec::parse("h", url).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
            assert!(err.contains("host \"h\""), "{url}: {err}");
        }
    }

    #[test]
    fn table_entry_checks_identity_and_workdir() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id");
        std::fs::write(&key, "key").unwrap();
        let entry = HostEntry::Table(HostTable {
            url: "ssh://u@h".into(),
            identity_file: Some(key.clone()),
            workdir: Some("/srv/bench".into()),
            known_hosts_file: None,
        });
        let h = HostSpec::from_entry("h", &entry).unwrap();
        assert_eq!(h.identity_file, Some(key));
        assert_eq!(h.workdir, PathBuf::from("/srv/bench"));

        let missing = HostEntry::Table(HostTable {
            url: "ssh://u@h".into(),
            identity_file: Some(dir.path().join("nope")),
            workdir: None,
            known_hosts_file: None,
        });
        let err = HostSpec::from_entry("h", &missing).unwrap_err().to_string();
        assert!(err.contains("cannot read identity file"), "{err}");

        let spaced = HostEntry::Table(HostTable {
            url: "ssh://u@h".into(),
            identity_file: None,
            workdir: Some("/srv/my bench".into()),
            known_hosts_file: None,
        });
        let err = HostSpec::from_entry("h", &spaced).unwrap_err().to_string();
        assert!(err.contains("working directory"), "{err}");
    }

    #[test]
    fn toml_table_reads_both_forms() {
        let table: BTreeMap<String, HostEntry> = toml::from_str(
            "a = \"ssh://u@10.0.0.1\"\nb = { url = \"ssh://u@10.0.0.2:23\", workdir = \"w\" }\n",
        )
        .unwrap();
        let hosts = parse_hosts(&table).unwrap();
        assert_eq!(hosts["a"].port, 22);
        assert_eq!(hosts["b"].port, 23);
        assert_eq!(hosts["b"].workdir, PathBuf::from("w"));

        let err = toml::from_str::<BTreeMap<String, HostEntry>>(
            "a = { url = \"ssh://a\", identity = \"k\" }\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `identity`"), "{err}");
        let err = toml::from_str::<BTreeMap<String, HostEntry>>("a = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ssh://user@address:port"), "{err}");
    }

    #[test]
    fn unknown_host_names_the_referrer_and_the_known() {
        let mut table = BTreeMap::new();
        table.insert("a".into(), HostSpec::parse("a", "ssh://a").unwrap());
        validate_hosts(&table, [("a", "target \"x\"")]).unwrap();
        let err = validate_hosts(&table, [("a", "t"), ("b", "client group \"c\"")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("client group \"c\" names host \"b\""), "{err}");
        assert!(err.contains("(defined: a)"), "{err}");
        let err = validate_hosts(&BTreeMap::new(), [("b", "t")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("defined: none"), "{err}");
    }
}
