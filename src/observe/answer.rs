//! What `stairbench observe` prints on another host and the host that asked reads back: the
//! window's [`Observation`] and the target's metrics windows, one JSON line.
//!
//! Both ends run the same binary, so the answer is read strictly: a field the types write
//! that the line lacks, or a key they do not know, is an error naming it, never a figure
//! silently defaulted (the tolerant reading of [`Observation`] is for old run directories).

use serde::de::DeserializeOwned;
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
    let typed: T = serde_path_to_error::deserialize(value).map_err(|e| {
        let field = join(at, &e.path().to_string());
        let why = e.into_inner().to_string();
        // A field without a default: serde names it, below the path.
        match missing_field(&why) {
            Some(name) => AnswerError::Missing(join(&field, name)),
            None => AnswerError::Malformed { field, why },
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

/// The field serde's "missing field `name`" names.
fn missing_field(why: &str) -> Option<&str> {
    why.strip_prefix("missing field `")?.split('`').next()
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
}
