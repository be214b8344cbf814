//! What `stairbench observe` prints on another host and the host that asked reads back: the
//! window's [`Observation`] and the target's metrics windows, one JSON line.
//!
//! Both ends run the same binary, so the answer is read strictly: a field the types write
//! that the line lacks, or a key they do not know, is an error naming it, never a figure
//! silently defaulted (the tolerant reading of [`Observation`] is for old run directories).

use std::fmt;

use serde::de::value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer};
use serde::de::{DeserializeOwned, Deserializer, IntoDeserializer, Visitor};
use serde::Serialize;
use serde_json::Value;

use super::Observation;
use crate::record::figures::ForeignJson;

/// The key of the metrics windows beside the observation's fields.
const TARGET_METRICS: &str = "target_metrics";

/// One remote observer's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ObserveAnswer {
    /// The figures of the window.
    #[serde(flatten)]
    pub observation: Observation,
    /// The difference over the window of each metrics file it was given, in order: that
    /// program's JSON, as it wrote it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub target_metrics: Vec<ForeignJson>,
}

/// Why an answer line is not an observation.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The line is not JSON.
    #[error("answered {line:?}, not JSON: {source}")]
    NotJson {
        /// The line (its first 200 characters).
        line: String,
        /// What serde said.
        source: serde_json::Error,
    },
    /// A field has the wrong type or value.
    #[error("its answer's `{field}` is malformed: {why}")]
    Malformed {
        /// The field's path (`server.user_s`).
        field: String,
        /// What serde said.
        why: String,
    },
    /// A field the types write is not in the answer.
    #[error("its answer lacks `{0}`")]
    Missing(String),
    /// The answer has a key the types have no field for (renamed, or another version's).
    #[error("its answer has `{0}`, which is no field of an observation")]
    Unknown(String),
}

impl ObserveAnswer {
    /// The line as the asking host writes it.
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// Reads an answer line strictly (see the module documentation).
    pub fn read(line: &str) -> Result<ObserveAnswer, AnswerError> {
        let not_json = |source| AnswerError::NotJson {
            line: line.chars().take(200).collect(),
            source,
        };
        let mut value: Value = serde_json::from_str(line).map_err(not_json)?;
        let metrics = match value.as_object_mut().and_then(|m| m.remove(TARGET_METRICS)) {
            Some(m) => strict::<Vec<ForeignJson>>(&m, TARGET_METRICS)?,
            None => Vec::new(),
        };
        Ok(ObserveAnswer {
            observation: strict(&value, "")?,
            target_metrics: metrics,
        })
    }
}

/// `value` as a `T`, its fields all there: a malformed field is an error with its path, and
/// so is a field `T` writes that `value` lacks (where `T` would default it) or a key of
/// `value` that `T` does not write. `at` is the path of `value` itself.
fn strict<T: Serialize + DeserializeOwned>(value: &Value, at: &str) -> Result<T, AnswerError> {
    let typed: T = serde_path_to_error::deserialize(Typed(value)).map_err(|e| {
        let field = join(at, &e.path().to_string());
        match e.into_inner() {
            // A field without a default, named below the path.
            ReadError::Missing(name) => AnswerError::Missing(join(&field, name)),
            ReadError::Other(why) => AnswerError::Malformed { field, why },
        }
    })?;
    let written = serde_json::to_value(&typed).map_err(|e| AnswerError::Malformed {
        field: at.to_string(),
        why: e.to_string(),
    })?;
    same_keys(value, &written, at)?;
    Ok(typed)
}

/// The first key `read` and `written` do not share, down every object and list; a key
/// `read` holds as null where the type writes none is no difference.
fn same_keys(read: &Value, written: &Value, at: &str) -> Result<(), AnswerError> {
    match (read, written) {
        (Value::Object(r), Value::Object(w)) => {
            if let Some(k) = w.keys().find(|k| !r.contains_key(*k)) {
                return Err(AnswerError::Missing(join(at, k)));
            }
            let unknown = r.iter().find(|(k, v)| !w.contains_key(*k) && !v.is_null());
            if let Some((k, _)) = unknown {
                return Err(AnswerError::Unknown(join(at, k)));
            }
            for (k, w) in w {
                same_keys(&r[k], w, &join(at, k))?;
            }
            Ok(())
        }
        (Value::Array(r), Value::Array(w)) => {
            for (i, (r, w)) in r.iter().zip(w).enumerate() {
                same_keys(r, w, &format!("{at}[{i}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Why a value did not read as its type: a field it lacks (serde's derive reports one through
/// [`serde::de::Error::missing_field`], kept here as the field's name), or anything else in
/// serde's words.
#[derive(Debug, Clone, PartialEq)]
enum ReadError {
    /// A field without a default is not in the value.
    Missing(&'static str),
    /// Any other reason.
    Other(String),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ReadError::Missing(name) => write!(f, "missing field `{name}`"),
            ReadError::Other(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ReadError {}

impl serde::de::Error for ReadError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ReadError::Other(msg.to_string())
    }

    fn missing_field(field: &'static str) -> Self {
        ReadError::Missing(field)
    }
}

/// A JSON value read as a serde [`Deserializer`] whose error is [`ReadError`]:
/// serde_json's own error keeps only the text of a missing field.
#[derive(Clone, Copy)]
struct Typed<'a>(&'a Value);

impl<'de> IntoDeserializer<'de, ReadError> for Typed<'_> {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl<'a> Typed<'a> {
    fn entries<'de>(
        m: &'a serde_json::Map<String, Value>,
    ) -> MapDeserializer<'de, impl Iterator<Item = (&'a str, Typed<'a>)>, ReadError> {
        MapDeserializer::new(m.iter().map(|(k, v)| (k.as_str(), Typed(v))))
    }
}

impl<'de> Deserializer<'de> for Typed<'_> {
    type Error = ReadError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, ReadError> {
        match self.0 {
            Value::Null => v.visit_unit(),
            Value::Bool(b) => v.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => v.visit_u64(u),
                (_, Some(i), _) => v.visit_i64(i),
                (_, _, Some(f)) => v.visit_f64(f),
                _ => Err(ReadError::Other(format!("{n} is no number"))),
            },
            Value::String(s) => v.visit_str(s),
            Value::Array(a) => v.visit_seq(SeqDeserializer::new(a.iter().map(Typed))),
            Value::Object(m) => v.visit_map(Typed::entries(m)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, ReadError> {
        match self.0 {
            Value::Null => v.visit_none(),
            _ => v.visit_some(self),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, ReadError> {
        match self.0 {
            Value::String(s) => {
                v.visit_enum(IntoDeserializer::<ReadError>::into_deserializer(s.as_str()))
            }
            Value::Object(m) => v.visit_enum(MapAccessDeserializer::new(Typed::entries(m))),
            _ => self.deserialize_any(v),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, ReadError> {
        v.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}

fn join(at: &str, key: &str) -> String {
    match (at.is_empty(), key) {
        (_, "" | ".") => at.to_string(),
        (true, _) => key.to_string(),
        (false, _) => format!("{at}.{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line() -> Value {
        let (obs, _) = crate::record::observed::tests::full();
        let answer = ObserveAnswer {
            observation: obs,
            target_metrics: vec![ForeignJson::note("no file")],
        };
        serde_json::from_str(&answer.to_line().unwrap()).unwrap()
    }

    fn read(v: &Value) -> Result<ObserveAnswer, AnswerError> {
        ObserveAnswer::read(&v.to_string())
    }

    #[test]
    fn an_answer_reads_back_as_it_was_written() {
        let (obs, _) = crate::record::observed::tests::full();
        let back = read(&line()).unwrap();
        assert_eq!(back.observation, obs);
        assert_eq!(back.target_metrics, [ForeignJson::note("no file")]);
        // Without metrics files: no key.
        let mut v = line();
        v.as_object_mut().unwrap().remove("target_metrics");
        assert!(read(&v).unwrap().target_metrics.is_empty());
    }

    #[test]
    fn a_missing_field_is_an_error_naming_it_at_any_depth() {
        let mut v = line();
        v.as_object_mut().unwrap().remove("window_s");
        let err = read(&v).unwrap_err().to_string();
        assert_eq!(err, "its answer lacks `window_s`");
        let mut v = line();
        v["server"].as_object_mut().unwrap().remove("user_s");
        let err = read(&v).unwrap_err().to_string();
        assert_eq!(err, "its answer lacks `server.user_s`");
        let mut v = line();
        v["perf"].as_object_mut().unwrap().remove("cycles");
        let err = read(&v).unwrap_err().to_string();
        assert_eq!(err, "its answer lacks `perf.cycles`");
        let mut v = line();
        v["server_cpus"][0]
            .as_object_mut()
            .unwrap()
            .remove("busy_pct");
        let err = read(&v).unwrap_err().to_string();
        assert_eq!(err, "its answer lacks `server_cpus[0].busy_pct`");
    }

    #[test]
    fn a_renamed_or_malformed_field_is_an_error_naming_it() {
        let mut v = line();
        let m = v.as_object_mut().unwrap();
        let busy = m.remove("server_cpus_busy_pct").unwrap();
        m.insert("server_busy_pct".into(), busy);
        let err = read(&v).unwrap_err().to_string();
        assert_eq!(err, "its answer lacks `server_cpus_busy_pct`");
        let mut v = line();
        v["threads"]["cpu_sauce"] = "schedstat".into();
        let err = read(&v).unwrap_err().to_string();
        assert!(err.contains("`threads.cpu_sauce`"), "{err}");
        let mut v = line();
        v["server"]["user_s"] = "a lot".into();
        let err = read(&v).unwrap_err().to_string();
        assert!(err.contains("`server.user_s` is malformed"), "{err}");
        let err = ObserveAnswer::read("perf: not permitted").unwrap_err();
        assert!(err.to_string().contains("perf: not permitted"), "{err}");
    }

    /// A field whose own reader fails with words that read like serde's missing field.
    fn says_missing<'de, D: serde::Deserializer<'de>>(_: D) -> Result<u32, D::Error> {
        Err(serde::de::Error::custom("missing field `z`"))
    }

    #[derive(Debug, Serialize, serde::Deserialize)]
    struct Two {
        a: u32,
        b: Option<u32>,
        #[serde(deserialize_with = "says_missing")]
        c: u32,
    }

    #[test]
    fn only_a_field_serde_finds_absent_is_missing() {
        let err = strict::<Two>(&serde_json::json!({"b": 1}), "top").unwrap_err();
        assert!(
            matches!(&err, AnswerError::Missing(f) if f == "top.a"),
            "{err:?}"
        );
        // Words are not a missing field: the field that failed is malformed.
        let err = strict::<Two>(&serde_json::json!({"a": 1, "b": 1, "c": 1}), "").unwrap_err();
        match err {
            AnswerError::Malformed { field, why } => {
                assert_eq!(field, "c");
                assert!(why.contains("missing field `z`"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
