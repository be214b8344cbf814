//! Reading a request file: lines, weights, words, placeholders.

use std::path::{Path, PathBuf};

use super::{Entry, Gen, Part, TemplateError, Text};
use crate::load::protocol::keys::KeySpaceError;
use crate::load::protocol::redis::KeySpace;
use crate::load::Distribution;

/// Largest `{rand:BYTES}`.
const MAX_RAND_BYTES: usize = 1 << 20;

/// The placeholders, for error messages.
const KNOWN: &str = "{seq}, {conn}, {uniform:N}, {zipf:THETA:N}, {rand:BYTES}; {{ is a literal {";

/// What is wrong with one line of a request file ([`TemplateError::at`] adds the file and line).
#[derive(Debug, thiserror::Error)]
pub(super) enum LineError {
    /// An indented line with no request line above it.
    #[error("an indented line (header or body) before any request line")]
    Orphan,
    /// `weight=N` and nothing after it.
    #[error("a weight with no request after it")]
    WeightAlone,
    /// A weight that is not 1 to 1000000.
    #[error("bad weight {0:?}: expected a whole number from 1 to 1000000")]
    Weight(String),
    /// Two `body` lines under one request.
    #[error("a second body for the same request")]
    SecondBody,
    /// An indented line that is neither `Name: value` nor `body ...`.
    #[error("{0:?} is neither a header (Name: value) nor a body (body TEXT or body @FILE)")]
    NotHeaderOrBody(String),
    /// `body @` with no file name.
    #[error("body @ names no file")]
    NoBodyFile,
    /// A `body @FILE` that cannot be read.
    #[error("cannot read body file {}: {source}", path.display())]
    BodyFile {
        /// The file, relative to the request file's directory.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A double quote with no closing one.
    #[error("unterminated quote in {0:?}")]
    Unterminated(String),
    /// `{name` with no `}`.
    #[error("unclosed placeholder {{{0}")]
    Unclosed(String),
    /// A known placeholder with a bad argument.
    #[error("bad placeholder {{{inner}}}: {why}")]
    Placeholder {
        /// What stands between the braces.
        inner: String,
        /// What is wrong with it.
        why: PlaceholderArg,
    },
    /// A name that is not a placeholder.
    #[error("unknown placeholder {{{0}}} (known: {known})", known = KNOWN)]
    Unknown(String),
}

/// The argument of a placeholder that is wrong.
#[derive(Debug, thiserror::Error)]
pub(super) enum PlaceholderArg {
    /// `N` of `{uniform:N}` or `{zipf:THETA:N}`.
    #[error("N must be a whole number of keys ≥ 1")]
    Keys,
    /// `THETA` of `{zipf:THETA:N}` is not a number.
    #[error("THETA must be a number between 0 and 1")]
    Theta,
    /// `BYTES` of `{rand:BYTES}`.
    #[error("BYTES must be from 1 to {max}", max = MAX_RAND_BYTES)]
    Bytes,
    /// A key space that cannot be drawn from.
    #[error(transparent)]
    KeySpace(#[from] KeySpaceError),
}

/// The entries of `text`, read from `path`.
pub(super) fn entries(path: &Path, text: &str) -> Result<Vec<Entry>, TemplateError> {
    let mut out: Vec<Entry> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |why: LineError| TemplateError::at(path, line, why);
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            let Some(entry) = out.last_mut() else {
                return Err(err(LineError::Orphan));
            };
            indented(path, line, trimmed, entry).map_err(err)?;
        } else {
            out.push(request_line(line, trimmed).map_err(err)?);
        }
    }
    Ok(out)
}

/// `[weight=N] WORD WORD...`
fn request_line(line: usize, s: &str) -> Result<Entry, LineError> {
    let (weight, rest) = match s.strip_prefix("weight=") {
        Some(w) => {
            let (num, rest) = w.split_once([' ', '\t']).unwrap_or((w, ""));
            (parse_weight(num)?, rest.trim_start())
        }
        None => (1, s),
    };
    let words = split_words(rest)?
        .iter()
        .map(|w| text(w))
        .collect::<Result<Vec<_>, _>>()?;
    if words.is_empty() {
        return Err(LineError::WeightAlone);
    }
    Ok(Entry {
        line,
        weight,
        words,
        headers: Vec::new(),
        body: None,
    })
}

fn parse_weight(s: &str) -> Result<u64, LineError> {
    match s.parse::<u64>() {
        Ok(w) if (1..=1_000_000).contains(&w) => Ok(w),
        _ => Err(LineError::Weight(s.to_string())),
    }
}

/// A header line (`Name: value`) or a body (`body TEXT`, `body @FILE`).
fn indented(path: &Path, line: usize, s: &str, entry: &mut Entry) -> Result<(), LineError> {
    if let Some(rest) = s
        .strip_prefix("body")
        .filter(|r| r.is_empty() || r.starts_with(' '))
    {
        if entry.body.is_some() {
            return Err(LineError::SecondBody);
        }
        let rest = rest.trim();
        let body = match rest.strip_prefix('@') {
            Some(file) => Text(vec![Part::Lit(read_body(path, file)?)]),
            None => text(rest)?,
        };
        entry.body = Some((line, body));
        return Ok(());
    }
    let name = s.split_once(':').map(|(n, _)| n).unwrap_or("");
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(LineError::NotHeaderOrBody(s.to_string()));
    }
    entry.headers.push((line, text(s)?));
    Ok(())
}

/// The bytes of a body file, relative to the request file's directory.
fn read_body(path: &Path, file: &str) -> Result<Vec<u8>, LineError> {
    let file = file.trim();
    if file.is_empty() {
        return Err(LineError::NoBodyFile);
    }
    let full = path.parent().unwrap_or(Path::new(".")).join(file);
    std::fs::read(&full).map_err(|source| LineError::BodyFile { path: full, source })
}

/// Splits on whitespace; double quotes group (with \" \\ \n \r \t escapes).
fn split_words(s: &str) -> Result<Vec<String>, LineError> {
    let mut words = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut word = String::new();
        if c == '"' {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(LineError::Unterminated(s.to_string())),
                    Some('"') => break,
                    Some('\\') => word.push(match chars.next() {
                        Some('n') => '\n',
                        Some('r') => '\r',
                        Some('t') => '\t',
                        Some(other) => other,
                        None => return Err(LineError::Unterminated(s.to_string())),
                    }),
                    Some(other) => word.push(other),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        words.push(word);
    }
    Ok(words)
}

/// Literal bytes and placeholders. `{` not followed by a lowercase name is literal (JSON
/// bodies need no escaping); `{{` is a literal `{`.
pub(super) fn text(s: &str) -> Result<Text, LineError> {
    let mut parts = Vec::new();
    let mut lit = Vec::new();
    let mut rest = s;
    while let Some(at) = rest.find('{') {
        lit.extend_from_slice(&rest.as_bytes()[..at]);
        let after = &rest[at + 1..];
        if let Some(r) = after.strip_prefix('{') {
            lit.push(b'{');
            rest = r;
            continue;
        }
        if !after.starts_with(|c: char| c.is_ascii_lowercase()) {
            lit.push(b'{');
            rest = after;
            continue;
        }
        let end = after
            .find('}')
            .ok_or_else(|| LineError::Unclosed(after.to_string()))?;
        if !lit.is_empty() {
            parts.push(Part::Lit(std::mem::take(&mut lit)));
        }
        parts.push(Part::Gen(placeholder(&after[..end])?));
        rest = &after[end + 1..];
    }
    lit.extend_from_slice(rest.as_bytes());
    if !lit.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(Text(parts))
}

fn placeholder(inner: &str) -> Result<Gen, LineError> {
    let fields: Vec<&str> = inner.split(':').collect();
    let bad = |why: PlaceholderArg| LineError::Placeholder {
        inner: inner.to_string(),
        why,
    };
    let count = |s: &str| s.parse::<u64>().ok().filter(|&n| n >= 1);
    match fields.as_slice() {
        ["seq"] => Ok(Gen::Seq),
        ["conn"] => Ok(Gen::Conn),
        ["uniform", n] => {
            let n = count(n).ok_or_else(|| bad(PlaceholderArg::Keys))?;
            Ok(Gen::Key(
                KeySpace::new(n, Distribution::Uniform).map_err(|e| bad(e.into()))?,
            ))
        }
        ["zipf", theta, n] => {
            let theta: f64 = theta.parse().map_err(|_| bad(PlaceholderArg::Theta))?;
            let n = count(n).ok_or_else(|| bad(PlaceholderArg::Keys))?;
            Ok(Gen::Key(
                KeySpace::new(n, Distribution::Zipf(theta)).map_err(|e| bad(e.into()))?,
            ))
        }
        ["rand", n] => match n.parse::<usize>() {
            Ok(b) if (1..=MAX_RAND_BYTES).contains(&b) => Ok(Gen::Rand(b)),
            _ => Err(bad(PlaceholderArg::Bytes)),
        },
        _ => Err(LineError::Unknown(inner.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Vec<Entry>, TemplateError> {
        entries(Path::new("req.txt"), s)
    }

    #[test]
    fn requests_headers_bodies_weights() {
        let e = parse(
            "# c\nGET /\n\nweight=3 POST /x/{seq}\n  Content-Type: text/plain\n  body a {conn} b\n",
        )
        .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!((e[0].line, e[0].weight, e[0].words.len()), (2, 1, 2));
        assert_eq!((e[1].line, e[1].weight), (4, 3));
        assert_eq!(e[1].headers.len(), 1);
        let body = &e[1].body.as_ref().unwrap().1;
        assert_eq!(
            body.0,
            vec![
                Part::Lit(b"a ".to_vec()),
                Part::Gen(Gen::Conn),
                Part::Lit(b" b".to_vec())
            ]
        );
    }

    #[test]
    fn placeholders_and_literal_braces() {
        let t = text(r#"{"id": {seq}, "k": "{uniform:100}"} {{seq}"#).unwrap();
        assert_eq!(t.0.len(), 5);
        assert_eq!(t.0[0], Part::Lit(br#"{"id": "#.to_vec()));
        assert_eq!(t.0[1], Part::Gen(Gen::Seq));
        assert_eq!(t.0[4], Part::Lit(br#""} {seq}"#.to_vec()));
        assert!(matches!(
            text("{rand:64}").unwrap().0[0],
            Part::Gen(Gen::Rand(64))
        ));
        assert!(matches!(
            text("{zipf:0.99:1000}").unwrap().0[0],
            Part::Gen(Gen::Key(_))
        ));
    }

    #[test]
    fn quoted_words() {
        assert_eq!(
            split_words(r#"SET k "a b\"c" x"#).unwrap(),
            vec!["SET", "k", "a b\"c", "x"]
        );
        assert!(split_words(r#"SET "k"#).is_err());
    }

    #[test]
    fn bad_input_names_file_and_line() {
        let msg = parse("GET /\nGET /{sequence}\n").unwrap_err().to_string();
        assert!(
            msg.starts_with("req.txt:2: unknown placeholder {sequence}"),
            "{msg}"
        );
        let msg = parse("weight=0 GET /\n").unwrap_err().to_string();
        assert!(msg.starts_with("req.txt:1: bad weight \"0\""), "{msg}");
        let msg = parse("weight=x GET /\n").unwrap_err().to_string();
        assert!(msg.contains("bad weight \"x\""), "{msg}");
        let msg = parse("GET /\n  body @no-such-file.bin\n")
            .unwrap_err()
            .to_string();
        assert!(
            msg.starts_with("req.txt:2: cannot read body file no-such-file.bin"),
            "{msg}"
        );
        assert!(parse("  X-A: 1\n")
            .unwrap_err()
            .to_string()
            .starts_with("req.txt:1:"));
        assert!(parse("GET /\n  not a header\n")
            .unwrap_err()
            .to_string()
            .contains("neither a header"));
        assert!(parse("GET /{zipf:2:10}\n")
            .unwrap_err()
            .to_string()
            .contains("zipf theta"));
        assert!(parse("GET /{rand:0}\n")
            .unwrap_err()
            .to_string()
            .contains("BYTES"));
        assert!(parse("GET /{uniform:0}\n")
            .unwrap_err()
            .to_string()
            .contains("N must be"));
        assert!(parse("GET /{seq\n")
            .unwrap_err()
            .to_string()
            .contains("unclosed"));
    }
}
