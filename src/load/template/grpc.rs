//! A gRPC request message made per call from JSON with placeholders (`load --data`): the
//! request templates' placeholders (`{seq}`, `{conn}`, `{uniform:N}`, `{zipf:THETA:N}`,
//! `{rand:BYTES}`) in string values, or standing for a number (`"age": {seq}`). The message is
//! checked by the method's input type ([`grpc_message`]) and compiled into encoded runs and
//! slots ([`CallTemplate`]): per call a connection draws the values, copies the runs, writes
//! the slots as their fields' wire types and patches the lengths of the strings and messages
//! that hold them. Nothing is parsed per call. A JSON without placeholders is encoded once.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use prost::Message as _;
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde::de::DeserializeSeed;
use serde_json::Value;

use super::{Gen, Part, Text};
use crate::load::protocol::grpc_message::{kind_name, MessageError, Method};
use crate::load::protocol::redis::SplitMix64;

/// `json` as `method`'s input message: its bytes when it holds no placeholder, else the
/// template each call's message is made from. An error names the JSON path and the type the
/// schema expects there (or why a placeholder cannot stand where it is).
pub fn message(method: &Method, json: &str) -> Result<Message, MessageError> {
    let (marked, gens) = mark_placeholders(json)?;
    let value: Value = serde_json::from_str(&marked)
        .map_err(|e| MessageError::Json(format!("the message is not JSON: {e}")))?;
    if gens.is_empty() {
        return method.encode_value(&value).map(Message::Fixed);
    }
    let input = method.input();
    let built = message_nodes(&input, &value, "", &gens);
    if let Err(Fail::Misplaced(why)) = built {
        return Err(MessageError::Json(why));
    }
    // The message's shape (a misspelt field, a wrong type) with each placeholder at a value
    // of its kind: the errors the JSON mapping gives, with their paths.
    method.encode_value(&sampled(value))?;
    let nodes = built.map_err(|_| {
        MessageError::Json(format!(
            ".: {} refuses the message with its placeholders",
            input.full_name()
        ))
    })?;
    let gens = gens.into_iter().map(|(gen, _)| gen).collect();
    Ok(Message::PerCall(Arc::new(CallTemplate::new(nodes, gens))))
}

/// `json` as one fixed message (a spec's `data`): as [`message`], a message with placeholders
/// refused.
pub fn fixed_message(method: &Method, json: &str) -> Result<Vec<u8>, MessageError> {
    match message(method, json)? {
        Message::Fixed(bytes) => Ok(bytes),
        Message::PerCall(_) => Err(MessageError::Json(
            ".: the message holds placeholders ({seq}, {uniform:N}, …): they make a message \
             per call, which `stairbench load --data` sends; here the message is one fixed \
             message (write {{ for a literal {)"
                .into(),
        )),
    }
}

/// A request message made from JSON.
#[derive(Debug, Clone)]
pub enum Message {
    /// No placeholder: the bytes, encoded once and sent by every call.
    Fixed(Vec<u8>),
    /// Placeholders: each call's message is made by its connection's [`Calls`].
    PerCall(Arc<CallTemplate>),
}

/// Marks a placeholder inside a JSON string while the JSON is parsed: `MARK`, its number in
/// the message's placeholders, `END` (Unicode private-use characters, refused in a message).
const MARK: char = '\u{E000}';
/// Marks a placeholder that stood where a JSON value goes (`"age": {seq}`), made a string.
const BARE: char = '\u{E001}';
const END: char = '\u{E002}';
/// `{seq}` values a connection takes from the shared counter at a time (as request files).
const SEQ_BLOCK: u64 = 64;
/// Bytes of framed messages allocated at a time (each call's message is a slice of it).
const ARENA_BYTES: usize = 16 << 10;
/// Protobuf wire types.
const VARINT: u64 = 0;
const I64: u64 = 1;
const LEN: u64 = 2;
const I32: u64 = 5;

/// A message with placeholders, compiled: shared by the connections of a load.
#[derive(Debug)]
pub struct CallTemplate {
    nodes: Vec<Node>,
    /// The placeholders, numbered as the nodes refer to them.
    gens: Vec<Gen>,
    /// Some placeholder is `{seq}` (one value per call, shared by every `{seq}` of it).
    has_seq: bool,
    /// `{seq}`'s counter, taken in blocks.
    seq: AtomicU64,
    /// Random characters `{rand:N}` copies from.
    rand_pool: Vec<u8>,
}

/// A piece of a compiled message.
#[derive(Debug)]
enum Node {
    /// Encoded fields, as they are.
    Lit(Box<[u8]>),
    /// A string field (or element, or map value) holding placeholders: its tag, then its
    /// length and text.
    Str { tag: Box<[u8]>, parts: Vec<StrPart> },
    /// A number field (or element, or map value) that is one placeholder: its tag, then the
    /// value as the field's type.
    Num {
        tag: Box<[u8]>,
        gen: usize,
        num: Num,
    },
    /// A message (field, element or map entry) holding placeholders: its tag, then its
    /// length and fields.
    Nested { tag: Box<[u8]>, nodes: Vec<Node> },
}

#[derive(Debug)]
enum StrPart {
    Lit(Box<[u8]>),
    /// A placeholder's text (by its number).
    Gen(usize),
}

/// A number field's type: how a drawn value (0 and up) is written. An integer type takes
/// the value modulo its largest value + 1 (`{seq}` in an int32 starts again at 0 after
/// 2^31 calls); a float type takes it rounded.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Sfixed32,
    Fixed64,
    Sfixed64,
    Float,
    Double,
}

impl Num {
    fn of(kind: &Kind) -> Option<Num> {
        Some(match kind {
            Kind::Int32 => Num::Int32,
            Kind::Int64 => Num::Int64,
            Kind::Uint32 => Num::Uint32,
            Kind::Uint64 => Num::Uint64,
            Kind::Sint32 => Num::Sint32,
            Kind::Sint64 => Num::Sint64,
            Kind::Fixed32 => Num::Fixed32,
            Kind::Sfixed32 => Num::Sfixed32,
            Kind::Fixed64 => Num::Fixed64,
            Kind::Sfixed64 => Num::Sfixed64,
            Kind::Float => Num::Float,
            Kind::Double => Num::Double,
            _ => return None,
        })
    }

    /// The largest value the type holds (all ones below it, so `v & max` wraps).
    fn max(self) -> u64 {
        match self {
            Num::Int32 | Num::Sint32 | Num::Sfixed32 => i32::MAX as u64,
            Num::Uint32 | Num::Fixed32 => u32::MAX as u64,
            Num::Int64 | Num::Sint64 | Num::Sfixed64 => i64::MAX as u64,
            Num::Uint64 | Num::Fixed64 | Num::Float | Num::Double => u64::MAX,
        }
    }

    fn wire_type(self) -> u64 {
        match self {
            Num::Fixed32 | Num::Sfixed32 | Num::Float => I32,
            Num::Fixed64 | Num::Sfixed64 | Num::Double => I64,
            _ => VARINT,
        }
    }

    fn write(self, v: u64, out: &mut Vec<u8>) {
        let v = v & self.max();
        match self {
            Num::Int32 | Num::Int64 | Num::Uint32 | Num::Uint64 => write_varint(v, out),
            // ZigZag of a value ≥ 0 is twice it.
            Num::Sint32 | Num::Sint64 => write_varint(v << 1, out),
            Num::Fixed32 | Num::Sfixed32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
            Num::Fixed64 | Num::Sfixed64 => out.extend_from_slice(&v.to_le_bytes()),
            Num::Float => out.extend_from_slice(&(v as f32).to_le_bytes()),
            Num::Double => out.extend_from_slice(&(v as f64).to_le_bytes()),
        }
    }
}

fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A field's tag as encoded.
fn tag(number: u32, wire_type: u64) -> Box<[u8]> {
    let mut out = Vec::new();
    write_varint((u64::from(number) << 3) | wire_type, &mut out);
    out.into_boxed_slice()
}

impl CallTemplate {
    fn new(mut nodes: Vec<Node>, gens: Vec<Gen>) -> Self {
        merge_lits(&mut nodes);
        let max_rand = gens
            .iter()
            .filter_map(|g| match g {
                Gen::Rand(n) => Some(*n),
                _ => None,
            })
            .max();
        CallTemplate {
            nodes,
            has_seq: gens.iter().any(|g| matches!(g, Gen::Seq)),
            gens,
            seq: AtomicU64::new(0),
            rand_pool: max_rand.map_or_else(Vec::new, super::rand_pool),
        }
    }

    /// Connection number `conn`'s maker of messages (its draws seeded by `seed`).
    pub fn connection(self: &Arc<Self>, conn: usize, seed: u64) -> Calls {
        Calls {
            template: Arc::clone(self),
            conn: conn as u64,
            rng: SplitMix64(seed),
            seq: 0,
            seq_end: 0,
            vals: vec![0; self.gens.len()],
            buf: Vec::new(),
            arena: BytesMut::new(),
        }
    }

    /// The message with every placeholder at its first value (`{seq}` 0, key 0): what
    /// `--verbose` sends once before the load.
    pub fn sample(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.render(&self.nodes, &vec![0; self.gens.len()], &mut out);
        out
    }

    fn render(&self, nodes: &[Node], vals: &[u64], out: &mut Vec<u8>) {
        for node in nodes {
            match node {
                Node::Lit(bytes) => out.extend_from_slice(bytes),
                Node::Num { tag, gen, num } => {
                    out.extend_from_slice(tag);
                    num.write(vals[*gen], out);
                }
                Node::Str { tag, parts } => {
                    out.extend_from_slice(tag);
                    let start = open_len(out);
                    for part in parts {
                        match part {
                            StrPart::Lit(bytes) => out.extend_from_slice(bytes),
                            StrPart::Gen(g) => self.write_text(*g, vals[*g], out),
                        }
                    }
                    close_len(out, start);
                }
                Node::Nested { tag, nodes } => {
                    out.extend_from_slice(tag);
                    let start = open_len(out);
                    self.render(nodes, vals, out);
                    close_len(out, start);
                }
            }
        }
    }

    /// Placeholder `g`'s text for value `v`, as a request file writes it.
    fn write_text(&self, g: usize, v: u64, out: &mut Vec<u8>) {
        match &self.gens[g] {
            Gen::Seq | Gen::Conn => super::write_decimal(out, v),
            Gen::Key(space) => super::write_padded(out, v, space.width()),
            Gen::Rand(n) => {
                let at = v as usize;
                out.extend_from_slice(&self.rand_pool[at..at + n]);
            }
        }
    }
}

/// A length prefix of one byte, to patch once the length is known; where the text starts.
fn open_len(out: &mut Vec<u8>) -> usize {
    out.push(0);
    out.len()
}

/// Writes the length of what follows `start`: in the byte kept for it when below 128 (most
/// strings and messages), else moving the text to make room.
fn close_len(out: &mut Vec<u8>, start: usize) {
    let n = out.len() - start;
    if n < 0x80 {
        out[start - 1] = n as u8;
        return;
    }
    let mut prefix = Vec::with_capacity(10);
    write_varint(n as u64, &mut prefix);
    out.splice(start - 1..start, prefix);
}

/// Joins adjacent encoded runs: one copy where there were several.
fn merge_lits(nodes: &mut Vec<Node>) {
    let mut merged: Vec<Node> = Vec::with_capacity(nodes.len());
    for mut node in nodes.drain(..) {
        if let Node::Nested { nodes: inner, .. } = &mut node {
            merge_lits(inner);
        }
        match (merged.last_mut(), node) {
            (Some(Node::Lit(prev)), Node::Lit(next)) => {
                *prev = [&prev[..], &next[..]].concat().into_boxed_slice();
            }
            (_, node) => merged.push(node),
        }
    }
    *nodes = merged;
}

/// One connection's messages: draws the placeholders' values and renders each call's message.
#[derive(Debug)]
pub struct Calls {
    template: Arc<CallTemplate>,
    /// The connection's number (`{conn}`).
    conn: u64,
    rng: SplitMix64,
    /// The next `{seq}` value, and the end of the block it is taken from.
    seq: u64,
    seq_end: u64,
    /// This call's value of each placeholder.
    vals: Vec<u64>,
    /// The framed message being rendered.
    buf: Vec<u8>,
    /// Where framed messages are copied to be sent (one allocation for many).
    arena: BytesMut,
}

impl Calls {
    /// The next call's message, framed as gRPC sends it (a 5-byte prefix, then the message).
    pub fn next_message(&mut self) -> Bytes {
        self.next_messages(1)
    }

    /// `n` messages, each made as [`Calls::next_message`] makes one, framed one after the
    /// other (a client stream's request body).
    pub fn next_messages(&mut self, n: u32) -> Bytes {
        for _ in 0..n {
            self.draw();
            let t = &*self.template;
            self.buf.clear();
            self.buf.extend_from_slice(&[0; 5]);
            t.render(&t.nodes, &self.vals, &mut self.buf);
            let len = (self.buf.len() - 5) as u32;
            self.buf[1..5].copy_from_slice(&len.to_be_bytes());
            if self.arena.capacity() - self.arena.len() < self.buf.len() {
                self.arena.reserve(ARENA_BYTES.max(self.buf.len()));
            }
            self.arena.extend_from_slice(&self.buf);
        }
        self.arena.split().freeze()
    }

    fn draw(&mut self) {
        let t = &*self.template;
        let seq = match t.has_seq {
            true => {
                if self.seq == self.seq_end {
                    self.seq = t.seq.fetch_add(SEQ_BLOCK, Ordering::Relaxed);
                    self.seq_end = self.seq + SEQ_BLOCK;
                }
                self.seq += 1;
                self.seq - 1
            }
            false => 0,
        };
        for (val, gen) in self.vals.iter_mut().zip(&t.gens) {
            *val = match gen {
                Gen::Seq => seq,
                Gen::Conn => self.conn,
                Gen::Key(space) => space.draw(&mut self.rng),
                Gen::Rand(_) => self.rng.next_u64() & (super::RAND_OFFSETS as u64 - 1),
            };
        }
    }
}

/// `json` with each placeholder replaced by a mark (inside a string: `MARK n END`; where a
/// value goes: the string `"BARE n END"`), so that it parses as JSON; and the placeholders.
fn mark_placeholders(json: &str) -> Result<(String, Vec<(Gen, String)>), MessageError> {
    if json.contains([MARK, BARE, END]) {
        return Err(MessageError::Json(
            "the message is not JSON stairbench takes: it holds U+E000, U+E001 or U+E002, \
             the characters that mark placeholders"
                .into(),
        ));
    }
    let mut out = String::with_capacity(json.len());
    let mut gens = Vec::new();
    let mut rest = json;
    while let Some(at) = rest.find(['"', '{']) {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if rest.as_bytes()[at] == b'"' {
            let end = string_end(after);
            out.push('"');
            mark_in_string(&after[..end], &mut out, &mut gens)?;
            rest = &after[end..];
            if let Some(r) = rest.strip_prefix('"') {
                out.push('"');
                rest = r;
            }
        } else if after.starts_with(|c: char| c.is_ascii_lowercase()) {
            out.push('"');
            rest = take_placeholder(rest, at, BARE, &mut out, &mut gens)?;
            out.push('"');
        } else {
            out.push('{');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok((out, gens))
}

/// The placeholder `{name…}` at `at` in `rest` marked in `out` with `mark` and its number,
/// and parsed into `gens`; what follows it.
fn take_placeholder<'a>(
    rest: &'a str,
    at: usize,
    mark: char,
    out: &mut String,
    gens: &mut Vec<(Gen, String)>,
) -> Result<&'a str, MessageError> {
    let after = &rest[at + 1..];
    let close = after.find('}').map_or(after.len(), |i| i + 1);
    let text = &rest[at..at + 1 + close];
    let _ = write!(out, "{mark}{}{END}", gens.len());
    gens.push((one_placeholder(text)?, text.to_string()));
    Ok(&after[close..])
}

fn bad_placeholder(text: &str, why: impl std::fmt::Display) -> MessageError {
    MessageError::Json(format!(
        "the message's placeholders: {why} (in {text:?}; write {{{{ for a literal {{)"
    ))
}

/// Where the JSON string whose text starts `s` ends (its closing quote, or the end).
fn string_end(s: &str) -> usize {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i,
            _ => i += 1,
        }
    }
    b.len()
}

/// A JSON string's text (escapes kept) with its placeholders marked; `{{` is a literal `{`,
/// as is a `{` not followed by a lowercase name (the request files' rule).
fn mark_in_string(
    raw: &str,
    out: &mut String,
    gens: &mut Vec<(Gen, String)>,
) -> Result<(), MessageError> {
    let mut rest = raw;
    while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(r) = after.strip_prefix('{') {
            out.push('{');
            rest = r;
        } else if after.starts_with(|c: char| c.is_ascii_lowercase()) {
            rest = take_placeholder(rest, at, MARK, out, gens)?;
        } else {
            out.push('{');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(())
}

/// The placeholder `text` (`{...}`) is.
fn one_placeholder(text: &str) -> Result<Gen, MessageError> {
    let parsed = Text::parse(text).map_err(|e| bad_placeholder(text, e))?;
    match parsed.0.as_slice() {
        [Part::Gen(gen)] => Ok(gen.clone()),
        _ => Err(bad_placeholder(text, "not one placeholder")),
    }
}

/// Why a message with placeholders could not be compiled.
enum Fail {
    /// A placeholder where it cannot stand: the error, with its path.
    Misplaced(String),
    /// The JSON does not fit the schema: the JSON mapping's error (from the sample) says how.
    Shape,
}

/// Whether `v` holds a placeholder's mark.
fn has_marks(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains([MARK, BARE]),
        Value::Array(items) => items.iter().any(has_marks),
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| k.contains([MARK, BARE]) || has_marks(v)),
        _ => false,
    }
}

/// `v` with each placeholder at a value of its kind: a bare one the number 0, one inside a
/// string the text "0".
fn sampled(v: Value) -> Value {
    match v {
        Value::String(s) if s.starts_with(BARE) => Value::from(0),
        Value::String(s) if s.contains(MARK) => {
            let mut out = String::with_capacity(s.len());
            let mut rest = s.as_str();
            while let Some(at) = rest.find(MARK) {
                out.push_str(&rest[..at]);
                out.push('0');
                rest = rest[at..].split_once(END).map_or("", |(_, r)| r);
            }
            out.push_str(rest);
            Value::String(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sampled).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, sampled(v))).collect())
        }
        other => other,
    }
}

/// Encodes a JSON object that holds no placeholder as message `m`.
fn encode_fixed(m: &MessageDescriptor, v: Value) -> Result<Vec<u8>, Fail> {
    m.clone()
        .deserialize(v)
        .map(|message| message.encode_to_vec())
        .map_err(|_| Fail::Shape)
}

/// Message `m` from the JSON object `v` at path `at`: its fields without placeholders
/// encoded once, then the ones with (protobuf takes a message's fields in any order; a
/// repeated field's elements stay in theirs).
fn message_nodes(
    m: &MessageDescriptor,
    v: &Value,
    at: &str,
    gens: &[(Gen, String)],
) -> Result<Vec<Node>, Fail> {
    let Value::Object(obj) = v else {
        return Err(Fail::Shape);
    };
    let (fixed, varying): (serde_json::Map<_, _>, Vec<_>) = {
        let mut fixed = serde_json::Map::new();
        let mut varying = Vec::new();
        for (key, v) in obj {
            match has_marks(v) || key.contains([MARK, BARE]) {
                true => varying.push((key, v)),
                false => {
                    fixed.insert(key.clone(), v.clone());
                }
            }
        }
        (fixed, varying)
    };
    let mut nodes = Vec::new();
    if !fixed.is_empty() {
        nodes.push(Node::Lit(encode_fixed(m, Value::Object(fixed))?.into()));
    }
    for (key, v) in varying {
        if key.contains([MARK, BARE]) {
            return Err(Fail::Misplaced(format!(
                "{}: a field name cannot hold a placeholder (they go in values)",
                path_or_top(at)
            )));
        }
        let f = m
            .get_field_by_json_name(key)
            .or_else(|| m.get_field_by_name(key))
            .ok_or(Fail::Shape)?;
        let path = format!("{at}.{key}");
        field_nodes(m, key, &f, v, &path, gens, &mut nodes)?;
    }
    Ok(nodes)
}

fn path_or_top(at: &str) -> &str {
    match at.is_empty() {
        true => ".",
        false => at,
    }
}

/// Field `f` (named `key` in message `m`'s JSON) with value `v`, which holds placeholders.
fn field_nodes(
    m: &MessageDescriptor,
    key: &str,
    f: &FieldDescriptor,
    v: &Value,
    path: &str,
    gens: &[(Gen, String)],
    nodes: &mut Vec<Node>,
) -> Result<(), Fail> {
    if f.is_map() {
        let (Kind::Message(entry), Value::Object(map)) = (f.kind(), v) else {
            return Err(Fail::Shape);
        };
        for (k, item) in map {
            let at = format!("{path}[{k:?}]");
            if k.contains([MARK, BARE]) {
                return Err(Fail::Misplaced(format!(
                    "{path}: a map key cannot hold a placeholder (they go in values)"
                )));
            }
            let one = serde_json::json!({ key: { k: item } });
            if !has_marks(item) {
                nodes.push(Node::Lit(encode_fixed(m, one)?.into()));
                continue;
            }
            let mut inner = vec![Node::Lit(
                encode_fixed(&entry, serde_json::json!({ "key": k }))?.into(),
            )];
            value_node(&entry.map_entry_value_field(), item, &at, gens, &mut inner)?;
            nodes.push(Node::Nested {
                tag: tag(f.number(), LEN),
                nodes: inner,
            });
        }
        return Ok(());
    }
    if f.is_list() {
        let Value::Array(items) = v else {
            return Err(Fail::Shape);
        };
        for (i, item) in items.iter().enumerate() {
            match has_marks(item) {
                false => {
                    let one = serde_json::json!({ key: [item] });
                    nodes.push(Node::Lit(encode_fixed(m, one)?.into()));
                }
                true => value_node(f, item, &format!("{path}[{i}]"), gens, nodes)?,
            }
        }
        return Ok(());
    }
    value_node(f, v, path, gens, nodes)
}

/// One value of field `f` (the field, an element or a map value) holding placeholders.
fn value_node(
    f: &FieldDescriptor,
    v: &Value,
    path: &str,
    gens: &[(Gen, String)],
    nodes: &mut Vec<Node>,
) -> Result<(), Fail> {
    let kind = f.kind();
    let misplaced = |why: String| Fail::Misplaced(format!("{path}: {why}"));
    let text = match v {
        Value::String(s) => s.as_str(),
        _ => "",
    };
    match &kind {
        Kind::Message(sub) if sub.full_name().starts_with("google.protobuf.") => {
            Err(misplaced(format!(
                "placeholders cannot go inside a {}: they go in string and number fields",
                sub.full_name()
            )))
        }
        Kind::Message(sub) => {
            let inner = message_nodes(sub, v, path, gens)?;
            nodes.push(Node::Nested {
                tag: tag(f.number(), LEN),
                nodes: inner,
            });
            Ok(())
        }
        Kind::String if text.starts_with(BARE) => Err(misplaced(format!(
            "a string field takes its placeholder inside quotes (\"{}\")",
            unmark(text, gens)
        ))),
        Kind::String => {
            nodes.push(Node::Str {
                tag: tag(f.number(), LEN),
                parts: str_parts(text, gens).ok_or(Fail::Shape)?,
            });
            Ok(())
        }
        _ => match Num::of(&kind) {
            Some(num) => {
                let gen = number_gen(text, gens, num, &kind, misplaced)?;
                nodes.push(Node::Num {
                    tag: tag(f.number(), num.wire_type()),
                    gen,
                    num,
                });
                Ok(())
            }
            None => Err(misplaced(format!(
                "a placeholder cannot make a value of {} ({}): placeholders go in string and \
                 number fields",
                kind_name(&kind),
                unmark(text, gens)
            ))),
        },
    }
}

/// The placeholder a number field's value is: one, alone, drawing numbers the type holds.
fn number_gen(
    text: &str,
    gens: &[(Gen, String)],
    num: Num,
    kind: &Kind,
    misplaced: impl Fn(String) -> Fail,
) -> Result<usize, Fail> {
    let shown = unmark(text, gens);
    let type_name = kind_name(kind);
    let Some(g) = lone_gen(text, gens.len()) else {
        return Err(misplaced(format!(
            "a {type_name} field takes one placeholder with nothing around it (\"{{seq}}\" or \
             {{seq}}), not {shown:?}"
        )));
    };
    match &gens[g].0 {
        Gen::Rand(_) => Err(misplaced(format!(
            "{shown} makes letters, not a {type_name}: a number field takes {{seq}}, {{conn}}, \
             {{uniform:N}} or {{zipf:THETA:N}}"
        ))),
        Gen::Key(space) if space.keys() - 1 > num.max() => Err(misplaced(format!(
            "{shown} draws numbers up to {}, more than a {type_name} holds ({})",
            space.keys() - 1,
            num.max()
        ))),
        _ => Ok(g),
    }
}

/// The placeholder number of a text that is one mark and nothing else.
fn lone_gen(text: &str, count: usize) -> Option<usize> {
    let inner = text.strip_prefix([MARK, BARE])?.strip_suffix(END)?;
    inner.parse().ok().filter(|&g| g < count)
}

/// A string value's literal runs and placeholders; none if a mark is broken.
fn str_parts(text: &str, gens: &[(Gen, String)]) -> Option<Vec<StrPart>> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(MARK) {
        if at > 0 {
            parts.push(StrPart::Lit(rest.as_bytes()[..at].into()));
        }
        let (number, after) = rest[at + MARK.len_utf8()..].split_once(END)?;
        let g: usize = number.parse().ok().filter(|&g| g < gens.len())?;
        parts.push(StrPart::Gen(g));
        rest = after;
    }
    if !rest.is_empty() {
        parts.push(StrPart::Lit(rest.as_bytes().into()));
    }
    Some(parts)
}

/// A marked text as the user wrote it (for errors).
fn unmark(text: &str, gens: &[(Gen, String)]) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find([MARK, BARE]) {
        out.push_str(&rest[..at]);
        let after = &rest[at + MARK.len_utf8()..];
        let Some((number, r)) = after.split_once(END) else {
            break;
        };
        match number.parse::<usize>().ok().and_then(|g| gens.get(g)) {
            Some((_, written)) => out.push_str(written),
            None => out.push_str("{?}"),
        }
        rest = r;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use prost_reflect::DynamicMessage;

    use super::*;
    use crate::load::protocol::grpc_message::{method, tests::schema, Schema};

    fn call(json: &str) -> Result<Message, MessageError> {
        let (_dir, s) = schema();
        message(&method(&s, "/demo.Svc/Call")?, json)
    }

    /// Mutated messages (bytes replaced, cut, repeated; 20 000 of them, seeded, some with
    /// placeholders): the encoder never panics, every refusal starts with the JSON path or
    /// says the text is not JSON or what is wrong with a placeholder, and every per-call
    /// message renders to bytes the input type decodes.
    #[test]
    fn mutated_json_never_panics_and_every_error_has_a_path() {
        let (ok, per_call, refused) = fuzz(20_000, 0x2545_f491_4f6c_dd1d);
        assert!(
            ok > 100 && per_call > 100 && refused > 10_000,
            "{ok} encoded, {per_call} per call, {refused} refused"
        );
    }

    /// The same over 10 million inputs (`cargo test --release --lib -- --ignored
    /// ten_million`; bench/grpc_json_fuzz.sh runs it and prints the counts).
    #[test]
    #[ignore = "minutes long: run by bench/grpc_json_fuzz.sh"]
    fn ten_million_mutated_messages_never_panic() {
        let n = std::env::var("STAIRBENCH_FUZZ_INPUTS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10_000_000);
        let started = std::time::Instant::now();
        let (ok, per_call, refused) = fuzz(n, 0x9e37_79b9_7f4a_7c15);
        println!(
            "fuzz: {n} inputs in {:.1} s: {ok} encoded, {per_call} per call, {refused} refused, \
             0 panics",
            started.elapsed().as_secs_f64()
        );
        assert!(ok > 0 && per_call > 0 && refused > n / 2);
    }

    /// What making a message per call costs the generator beside the load (a render, the
    /// framing and the copy out), against the fixed message's clone of its bytes: the message
    /// of bench/grpc_json_percall.sh, 2 million times each (`cargo test --release --lib --
    /// --ignored per_call_message_cost --nocapture`; bench/grpc_json_fuzz.sh runs it too).
    #[test]
    #[ignore = "a timing: run in the release profile by bench/grpc_json_fuzz.sh"]
    fn per_call_message_cost() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/greeter.proto");
        let schema = Schema::Proto {
            file,
            import_paths: Vec::new(),
        };
        let m = method(&schema, "/greeter.Greeter/SayHello").unwrap();
        let json = r#"{"user": {"name": "u-{seq}", "age": {uniform:10}, "tags": ["fixed",
            "k{zipf:0.99:1000}"]}, "requestId": {seq}, "labels": {"conn": "{conn}", "region": "eu"}}"#;
        let Message::PerCall(t) = message(&m, json).unwrap() else {
            panic!("no placeholder");
        };
        let fixed = Bytes::from(crate::wire::grpc::frame(&t.sample()));
        let mut calls = t.connection(1, 7);
        let n = 2_000_000;
        let (mut bytes, started) = (0, std::time::Instant::now());
        for _ in 0..n {
            bytes += std::hint::black_box(calls.next_message()).len();
        }
        let per_call_ns = started.elapsed().as_nanos() as f64 / n as f64;
        let started = std::time::Instant::now();
        for _ in 0..n {
            bytes += std::hint::black_box(fixed.clone()).len();
        }
        let fixed_ns = started.elapsed().as_nanos() as f64 / n as f64;
        println!(
            "message cost: per call {per_call_ns:.1} ns, fixed {fixed_ns:.1} ns \
             ({} bytes framed, {bytes} in all)",
            fixed.len()
        );
        assert!(bytes > 2 * n);
    }

    /// `n` mutated messages from `seed`: how many were encoded once, made per call, refused.
    fn fuzz(n: usize, seed: u64) -> (usize, usize, usize) {
        let (_dir, s) = schema();
        let m = method(&s, "/demo.Svc/Call").unwrap();
        let input = m.input();
        // Half the inputs start from a message with placeholders.
        let seeds = [
            concat!(
                r#"{"user": {"name": "Jo", "age": 7, "id": "9"}, "kind": "FAST", "tags": ["a"], "#,
                r#""friends": [{"age": 1}], "scores": {"k": 2}, "blob": "AA==", "#,
                r#""at": "2020-01-01T00:00:00Z", "userCount": 3}"#
            ),
            concat!(
                r#"{"user": {"name": "J{seq}", "age": {uniform:99}, "id": "{seq}"}, "#,
                r#""tags": ["a", "{rand:3}"], "friends": [{"age": {conn}}], "#,
                r#""scores": {"k": {seq}}, "people": {"p": {"name": "{zipf:0.9:9}"}}, "#,
                r#""at": "2020-01-01T00:00:00Z", "userCount": 3}"#
            ),
        ];
        let pieces: [&[u8]; 17] = [
            b"{",
            b"}",
            b"[",
            b"]",
            b"\"",
            b":",
            b",",
            b"1e999",
            b"-",
            b"null",
            b"\"FAST\"",
            b"{\"x\":",
            b"{seq}",
            b"{uniform:9}",
            b"{rand:3}",
            b"\"{seq}\"",
            b"{con",
        ];
        let mut state = seed;
        let mut next = |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        };
        let (mut ok, mut per_call, mut refused) = (0, 0, 0);
        for i in 0..n {
            let mut text = seeds[i % 2].as_bytes().to_vec();
            for _ in 0..1 + next(3) {
                let at = next(text.len() + 1);
                let piece = pieces[next(pieces.len())];
                let end = match next(3) {
                    0 => (at + 1).min(text.len()),
                    1 => at,
                    _ => (at + next(8)).min(text.len()),
                };
                let with: &[u8] = if end > at && next(2) == 0 { &[] } else { piece };
                text.splice(at..end, with.iter().copied());
            }
            let Ok(json) = std::str::from_utf8(&text) else {
                continue;
            };
            match message(&m, json) {
                Ok(Message::Fixed(_)) => ok += 1,
                Ok(Message::PerCall(t)) => {
                    per_call += 1;
                    let framed = t.connection(0, 1).next_message();
                    assert!(
                        DynamicMessage::decode(input.clone(), &framed[5..]).is_ok(),
                        "{json}"
                    );
                }
                Err(e) => {
                    let e = e.to_string();
                    refused += 1;
                    assert!(
                        e.starts_with('.')
                            || e.starts_with("the message is not JSON")
                            || e.starts_with("the message's placeholders"),
                        "{json} -> {e}"
                    );
                }
            }
        }
        (ok, per_call, refused)
    }

    /// The messages `json` makes on one connection: `n` calls, decoded by the input type
    /// (grpc framing checked) to JSON.
    fn calls(json: &str, n: usize) -> Vec<Value> {
        let (_dir, s) = schema();
        let m = method(&s, "/demo.Svc/Call").unwrap();
        let Message::PerCall(t) = message(&m, json).unwrap() else {
            panic!("{json}: no placeholder found");
        };
        let mut conn = t.connection(3, 7);
        (0..n)
            .map(|_| {
                let framed = conn.next_message();
                assert_eq!(framed[0], 0);
                let len = u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize;
                assert_eq!(len, framed.len() - 5);
                let msg = DynamicMessage::decode(m.input(), &framed[5..]).unwrap();
                serde_json::to_value(&msg).unwrap()
            })
            .collect()
    }

    #[test]
    fn a_message_without_placeholders_is_encoded_once() {
        let (_dir, s) = schema();
        let m = method(&s, "/demo.Svc/Call").unwrap();
        let json = r#"{"user": {"name": "{{x} {Jo}"}, "kind": "FAST"}"#;
        let Message::Fixed(bytes) = message(&m, json).unwrap() else {
            panic!("fixed JSON made per call");
        };
        assert_eq!(bytes, b"\x0a\x0a\x0a\x08{x} {Jo}\x10\x01");
        assert_eq!(fixed_message(&m, json).unwrap(), bytes);
        let e = fixed_message(&m, r#"{"user": {"age": {seq}}}"#).unwrap_err();
        assert!(e.to_string().contains("message per call"), "{e}");
    }

    /// Every kind of place a placeholder goes: a nested string and number, a repeated
    /// string and a repeated message's number, a map's value and a map's message value,
    /// sint32 (ZigZag), fixed64, double; a string past 127 bytes (a two-byte length). Each
    /// call's `{seq}` is one value everywhere in it and the next call's is the next.
    #[test]
    fn placeholders_are_drawn_per_call_and_encoded_as_their_fields_types() {
        let json = r#"{"user": {"name": "u-{seq}", "age": {seq}, "id": "{uniform:1000}"},
            "kind": "SLOW", "tags": ["a", "t{conn}", "b"], "friends": [{"name": "f"}, {"age": {seq}}],
            "scores": {"k": "{seq}", "fixed": 3}, "delta": {seq}, "big": "{seq}", "ratio": {seq},
            "people": {"p": {"name": "{rand:150}", "id": {zipf:0.99:50}}}}"#;
        let got = calls(json, 70);
        let mut ids = std::collections::HashSet::new();
        for (seq, call) in got.iter().enumerate() {
            let user = &call["user"];
            assert_eq!(user["name"], format!("u-{seq}"), "{call}");
            assert_eq!(
                user["age"].as_u64(),
                Some(seq as u64).filter(|&s| s > 0),
                "{call}"
            );
            let id: u64 = user["id"].as_str().unwrap_or("0").parse().unwrap();
            assert!(id < 1000, "{call}");
            ids.insert(id);
            assert_eq!(call["kind"], "SLOW");
            assert_eq!(call["tags"], serde_json::json!(["a", "t3", "b"]), "{call}");
            assert_eq!(call["friends"][0]["name"], "f");
            assert_eq!(call["scores"]["fixed"], 3);
            assert_eq!(call["scores"]["k"].as_u64().unwrap_or(0), seq as u64);
            assert_eq!(call["delta"].as_u64().unwrap_or(0), seq as u64, "{call}");
            assert_eq!(call["big"].as_str().unwrap_or("0"), seq.to_string());
            assert_eq!(call["ratio"].as_f64().unwrap_or(0.0), seq as f64);
            let person = &call["people"]["p"];
            let name = person["name"].as_str().unwrap();
            assert_eq!(name.len(), 150);
            assert!(name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
            assert!(person["id"].as_str().unwrap_or("0").parse::<u64>().unwrap() < 50);
        }
        assert!(
            ids.len() > 50,
            "{{uniform:1000}} drew {} distinct ids in 70",
            ids.len()
        );
        // 70 calls take two blocks of {seq}: still 0 to 69 on one connection.
        assert_eq!(got[69]["user"]["name"], "u-69");
    }

    #[test]
    fn an_integer_type_takes_a_value_modulo_its_size() {
        let mut out = Vec::new();
        Num::Int32.write((1 << 31) + 5, &mut out);
        Num::Uint32.write((1 << 32) + 6, &mut out);
        Num::Sint32.write(3, &mut out);
        Num::Fixed32.write(1 << 32, &mut out);
        assert_eq!(out, [5, 6, 6, 0, 0, 0, 0]);
    }

    /// A placeholder where no value of the field's type can come from it is refused before
    /// any load, with its path.
    #[test]
    fn a_placeholder_the_field_cannot_take_is_refused_with_its_path() {
        let cases: [(&str, &str); 11] = [
            (r#"{"on": {seq}}"#, ".on: a placeholder cannot make a value of bool ({seq})"),
            (r#"{"kind": "{seq}"}"#, ".kind: a placeholder cannot make a value of enum demo.Kind"),
            (r#"{"blob": "{rand:4}"}"#, ".blob: a placeholder cannot make a value of bytes"),
            (r#"{"user": {"age": "{rand:4}"}}"#, ".user.age: {rand:4} makes letters, not a int32"),
            (r#"{"user": {"age": "x{seq}"}}"#, ".user.age: a int32 field takes one placeholder with nothing around it (\"{seq}\" or {seq}), not \"x{seq}\""),
            (r#"{"user": {"age": {uniform:3000000000}}}"#, ".user.age: {uniform:3000000000} draws numbers up to 2999999999, more than a int32 holds (2147483647)"),
            (r#"{"user": {"name": {seq}}}"#, ".user.name: a string field takes its placeholder inside quotes (\"{seq}\")"),
            (r#"{"scores": {"{seq}": 1}}"#, ".scores: a map key cannot hold a placeholder"),
            (r#"{"at": "2020-01-0{uniform:9}T00:00:00Z"}"#, ".at: placeholders cannot go inside a google.protobuf.Timestamp"),
            (r#"{"user": {"nmae": "{seq}"}}"#, ".user.nmae: demo.User has no field \"nmae\""),
            (r#"{"user": {"name": "{sequence}"}}"#, "the message's placeholders: unknown placeholder {sequence}"),
        ];
        for (json, says) in cases {
            let e = call(json).unwrap_err().to_string();
            assert!(e.starts_with(says), "{json}: {e}");
        }
        // A wrong fixed field beside a good placeholder: the JSON mapping's error, its path.
        let e = call(r#"{"user": {"name": "{seq}", "age": true}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(".user.age: ") && e.ends_with("expects int32"),
            "{e}"
        );
    }
}
