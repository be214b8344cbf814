//! HPACK against other implementations: every story of hpack-test-case (header blocks
//! written by nghttp2, go's hpack, python-hpack and Haskell's http2, some with table-size
//! changes) decodes to the headers its encoder was given, case after case through one
//! decoder per story (the dynamic table carries over); and our encoder's blocks of the
//! raw-data stories decode back to their headers.
//!
//! The suite lives beside the checkout, in `shared/conformance/hpack-test-case/` (CI puts
//! `shared/` next to the repository); `STAIRBENCH_SHARED` names another `shared/`.

use std::path::{Path, PathBuf};

use serde_json::Value;
use stairbench::wire::hpack::{self, Decoder};

use crate::common;

const SUITE: &str = "conformance/hpack-test-case";

/// The suite's directory: `$STAIRBENCH_SHARED`, else `../shared` beside the repository, else
/// `/work/shared`.
fn suite_dir() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = std::env::var_os("STAIRBENCH_SHARED")
        .map(PathBuf::from)
        .into_iter()
        .chain([repo.join("../shared"), PathBuf::from("/work/shared")]);
    candidates.map(|s| s.join(SUITE)).find(|d| d.is_dir())
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// A case's headers, in order.
fn headers(case: &Value, at: &str) -> Vec<(String, String)> {
    case["headers"]
        .as_array()
        .unwrap_or_else(|| panic!("{at}: no headers"))
        .iter()
        .flat_map(|h| h.as_object().expect("a header object").iter())
        .map(|(n, v)| (n.clone(), v.as_str().expect("a string value").to_string()))
        .collect()
}

fn decode(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, hpack::HpackError> {
    let mut out = Vec::new();
    d.decode(block, |n, v| {
        out.push((
            String::from_utf8(n.to_vec()).expect("a UTF-8 name"),
            String::from_utf8(v.to_vec()).expect("a UTF-8 value"),
        ))
    })?;
    Ok(out)
}

/// The story files of a folder, sorted.
fn stories(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("story_") && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files
}

fn read_story(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Stories, cases and headers checked.
#[derive(Default, Debug)]
struct Counts {
    stories: usize,
    cases: usize,
    headers: usize,
}

/// Decodes every case of `story` with one decoder and compares every header.
fn check_story(path: &Path, counts: &mut Counts) {
    let story = read_story(path);
    let mut decoder = Decoder::new(hpack::DEFAULT_TABLE_SIZE);
    let cases = story["cases"].as_array().expect("cases");
    for (i, case) in cases.iter().enumerate() {
        let at = format!("{} case {i}", path.display());
        // The SETTINGS_HEADER_TABLE_SIZE in force: the most a table-size update may ask.
        if let Some(size) = case["header_table_size"].as_u64() {
            decoder.set_limit(size as usize);
        }
        let wire = hex(case["wire"].as_str().expect("wire"));
        let got = decode(&mut decoder, &wire).unwrap_or_else(|e| panic!("{at}: {e}"));
        let want = headers(case, &at);
        assert_eq!(got, want, "{at}");
        counts.cases += 1;
        counts.headers += want.len();
    }
    counts.stories += 1;
}

fn suite_or_skip() -> Option<PathBuf> {
    let dir = suite_dir();
    if dir.is_none() {
        common::skip_or_fail(format!(
            "no {SUITE} in $STAIRBENCH_SHARED, ../shared beside the repository or /work/shared"
        ));
    }
    dir
}

#[test]
fn every_story_of_every_encoder_decodes_to_its_headers() {
    let Some(dir) = suite_or_skip() else { return };
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.ends_with("raw-data"))
        .collect();
    folders.sort();
    let mut total = Counts::default();
    for folder in &folders {
        let mut counts = Counts::default();
        for story in stories(folder) {
            check_story(&story, &mut counts);
        }
        eprintln!("{}: {counts:?}", folder.display());
        assert!(counts.stories > 0, "{}: no story", folder.display());
        total.stories += counts.stories;
        total.cases += counts.cases;
        total.headers += counts.headers;
    }
    eprintln!("hpack-test-case: {} folders, {total:?}", folders.len());
    // The suite as stored: 5 encoders' folders of 31-32 stories each.
    assert!(folders.len() >= 5, "{folders:?}");
    assert!(total.stories >= 150 && total.cases >= 3000, "{total:?}");
}

#[test]
fn our_blocks_of_the_raw_data_stories_decode_back() {
    let Some(dir) = suite_or_skip() else { return };
    let mut counts = Counts::default();
    let mut bytes = (0usize, 0usize);
    for path in stories(&dir.join("raw-data")) {
        let story = read_story(&path);
        let mut decoder = Decoder::new(hpack::DEFAULT_TABLE_SIZE);
        for (i, case) in story["cases"].as_array().expect("cases").iter().enumerate() {
            let at = format!("{} case {i}", path.display());
            let want = headers(case, &at);
            let mut block = Vec::new();
            for (n, v) in &want {
                hpack::encode_field(n.as_bytes(), v.as_bytes(), &mut block);
                bytes.0 += n.len() + v.len();
            }
            bytes.1 += block.len();
            let got = decode(&mut decoder, &block).unwrap_or_else(|e| panic!("{at}: {e}"));
            assert_eq!(got, want, "{at}");
            // Stateless: nothing was indexed.
            assert_eq!(decoder.table().entries(), 0, "{at}");
            counts.cases += 1;
            counts.headers += want.len();
        }
        counts.stories += 1;
    }
    eprintln!(
        "raw-data round trip: {counts:?}, {} bytes of names and values in {} bytes of blocks",
        bytes.0, bytes.1
    );
    assert!(counts.stories >= 30 && counts.cases >= 600, "{counts:?}");
    // Huffman coding shrinks text headers.
    assert!(bytes.1 < bytes.0, "{bytes:?}");
}
