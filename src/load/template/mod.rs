//! Request templates (`--requests FILE`): a plain-text list of requests, each with an
//! optional weight, whose placeholders (`{seq}`, `{conn}`, `{uniform:N}`, `{zipf:THETA:N}`,
//! `{rand:BYTES}`) are filled per request.
//!
//! The file is read and checked once (every error names the file and line); [`compile`] turns
//! it into byte pieces for one protocol, and each connection then renders a request by copying
//! those pieces and formatting a few integers: nothing is parsed per request.
//!
//! ```text
//! # comment
//! GET /index.html
//! weight=3 GET /item/{zipf:0.99:100000}
//!     Accept: text/html
//! POST /items/{seq}
//!     Content-Type: application/json
//!     body {"id": {seq}, "pad": "{rand:32}"}
//! PUT /blob
//!     body @blob.bin
//! ```
//!
//! For redis each request line is a command and its arguments (`SET key:{seq} {rand:64}`),
//! double quotes grouping an argument with spaces.

mod compile;
pub mod grpc;
mod h2;
mod parse;

use std::path::{Path, PathBuf};

pub use compile::{compile, Compiled, Framing};
pub(crate) use compile::{rand_pool, write_decimal, write_padded, RAND_OFFSETS};
pub use h2::{is_connection_specific, H2Requests};

use super::protocol::redis::KeySpace;

/// How each connection picks its next request from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// At random, in proportion to the weights (seeded per connection).
    #[default]
    Weighted,
    /// The file's requests in turn (each connection from the first), weights ignored.
    Sequential,
}

/// An `--order` that is neither `weighted` nor `sequential`.
#[derive(Debug, thiserror::Error)]
#[error("bad order {0:?}: use weighted or sequential")]
pub struct BadOrder(String);

impl std::str::FromStr for Order {
    type Err = BadOrder;

    fn from_str(s: &str) -> Result<Self, BadOrder> {
        match s {
            "weighted" => Ok(Order::Weighted),
            "sequential" => Ok(Order::Sequential),
            _ => Err(BadOrder(s.to_string())),
        }
    }
}

/// A request file as read and checked: its entries, with their placeholders resolved.
#[derive(Debug, Clone)]
pub struct RequestFile {
    /// Where it was read from (kept for errors and for loads on other processes).
    pub path: PathBuf,
    /// The requests, in file order.
    pub entries: Vec<Entry>,
}

/// One request of the file.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Line of the request line (1-based).
    pub line: usize,
    /// Relative weight, at least 1.
    pub weight: u64,
    /// The words of the request line: METHOD and PATH (HTTP) or a command and its arguments.
    pub words: Vec<Text>,
    /// HTTP headers as (line, `Name: value`).
    pub headers: Vec<(usize, Text)>,
    /// The HTTP body and its line.
    pub body: Option<(usize, Text)>,
}

/// A text with placeholders: literal bytes and generators in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Text(pub Vec<Part>);

/// A piece of a [`Text`].
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Bytes written as they are.
    Lit(Vec<u8>),
    /// A value drawn per request.
    Gen(Gen),
}

/// A placeholder.
#[derive(Debug, Clone)]
pub enum Gen {
    /// `{seq}`: 0, 1, 2, … over all connections of the load, each value once.
    Seq,
    /// `{conn}`: the connection's number (0 to connections − 1).
    Conn,
    /// `{uniform:N}` or `{zipf:THETA:N}`: a key rank below N, zero-padded to N − 1's width.
    Key(KeySpace),
    /// `{rand:BYTES}`: that many random characters of `[A-Za-z0-9_-]`.
    Rand(usize),
}

impl PartialEq for Gen {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Gen::Seq, Gen::Seq) | (Gen::Conn, Gen::Conn) => true,
            (Gen::Key(a), Gen::Key(b)) => a.keys() == b.keys(),
            (Gen::Rand(a), Gen::Rand(b)) => a == b,
            _ => false,
        }
    }
}

/// A request file that cannot be used; the message names the file and line.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TemplateError(pub String);

impl TemplateError {
    fn at(path: &Path, line: usize, why: impl std::fmt::Display) -> Self {
        TemplateError(format!("{}:{line}: {why}", path.display()))
    }
}

impl Text {
    /// `s`'s literal bytes and placeholders, by the request file's rules (`{{` is a literal
    /// `{`, as is a `{` not followed by a lowercase name); the error says what is wrong.
    pub fn parse(s: &str) -> Result<Text, TemplateError> {
        parse::text(s).map_err(|e| TemplateError(e.to_string()))
    }
}

impl RequestFile {
    /// Reads and checks `path`; `@file` bodies are read relative to its directory.
    pub fn read(path: &Path) -> Result<Self, TemplateError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            TemplateError(format!("cannot read request file {}: {e}", path.display()))
        })?;
        let entries = parse::entries(path, &text)?;
        if entries.is_empty() {
            return Err(TemplateError(format!(
                "{} holds no request (one per line: METHOD PATH, or a redis command)",
                path.display()
            )));
        }
        Ok(RequestFile {
            path: path.to_path_buf(),
            entries,
        })
    }

    fn error(&self, line: usize, why: impl std::fmt::Display) -> TemplateError {
        TemplateError::at(&self.path, line, why)
    }
}
