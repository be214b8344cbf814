//! speedscope's JSON file format (which speedscope and the Firefox Profiler open): one sampled
//! profile per thread frame, frames shared, integer weights.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::transform::frames;
use super::Folded;

/// The top-level speedscope file.
#[derive(Debug, Serialize)]
pub struct File {
    #[serde(rename = "$schema")]
    schema: &'static str,
    shared: Shared,
    profiles: Vec<Profile>,
    name: String,
    #[serde(rename = "activeProfileIndex")]
    active_profile_index: usize,
    exporter: String,
}

#[derive(Debug, Serialize)]
struct Shared {
    frames: Vec<Frame>,
}

#[derive(Debug, Serialize)]
struct Frame {
    name: String,
}

#[derive(Debug, Serialize)]
struct Profile {
    #[serde(rename = "type")]
    kind: &'static str,
    name: String,
    unit: &'static str,
    #[serde(rename = "startValue")]
    start_value: u64,
    #[serde(rename = "endValue")]
    end_value: u64,
    samples: Vec<Vec<usize>>,
    weights: Vec<u64>,
}

/// Builds the speedscope document; `event` picks the unit (`nanoseconds` for cpu-clock).
pub fn build(folded: &Folded, name: &str, event: Option<&str>) -> File {
    let unit = match event {
        Some("cpu-clock") | Some("task-clock") => "nanoseconds",
        _ => "none",
    };
    let mut frame_index: HashMap<&str, usize> = HashMap::new();
    let mut shared = Vec::new();
    let mut by_thread: BTreeMap<&str, Profile> = BTreeMap::new();
    for (stack, count) in folded.stacks() {
        let mut all = frames(stack);
        let thread = all.next().unwrap_or_default();
        let sample: Vec<usize> = all
            .map(|f| {
                *frame_index.entry(f).or_insert_with(|| {
                    shared.push(Frame {
                        name: f.to_string(),
                    });
                    shared.len() - 1
                })
            })
            .collect();
        let profile = by_thread.entry(thread).or_insert_with(|| Profile {
            kind: "sampled",
            name: thread.to_string(),
            unit,
            start_value: 0,
            end_value: 0,
            samples: Vec::new(),
            weights: Vec::new(),
        });
        profile.samples.push(sample);
        profile.weights.push(*count);
        profile.end_value += count;
    }
    File {
        schema: "https://www.speedscope.app/file-format-schema.json",
        shared: Shared { frames: shared },
        profiles: by_thread.into_values().collect(),
        name: name.to_string(),
        active_profile_index: 0,
        exporter: format!("stairbench {}", env!("CARGO_PKG_VERSION")),
    }
}

/// The speedscope JSON text.
pub fn to_json(folded: &Folded, name: &str, event: Option<&str>) -> String {
    serde_json::to_string(&build(folded, name, event)).expect("speedscope file serialises")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_profile_per_thread_with_shared_frames() {
        let f = Folded::from_pairs([("a;main;x".to_string(), 2), ("b;main;y".to_string(), 3)]);
        let v: serde_json::Value =
            serde_json::from_str(&to_json(&f, "p", Some("cpu-clock"))).unwrap();
        assert_eq!(v["shared"]["frames"].as_array().unwrap().len(), 3);
        assert_eq!(v["profiles"][0]["name"], "a");
        assert_eq!(v["profiles"][1]["samples"][0], serde_json::json!([0, 2]));
        assert_eq!(v["profiles"][1]["endValue"], 3);
        assert_eq!(v["profiles"][0]["unit"], "nanoseconds");
    }
}
