//! The runner's leftovers of issues 11 and 16: readiness errors that name the user's address,
//! exit codes by kind of error, client saturation judged per CPU, and observers that cover
//! the load's measured window.

mod common;

use std::path::Path;

/// A spec whose one target never listens: `sleep` with a tcp readiness probe.
fn never_ready_spec(dir: &Path, url: &str) -> std::path::PathBuf {
    let spec = dir.join("never.toml");
    let text = format!(
        "name = \"never\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1]\n\
         [[targets]]\nname = \"mute\"\ncommand = \"sleep 30\"\nurl = \"{url}\"\n\
         ready = {{ tcp = true, timeout = \"1s\" }}\n"
    );
    std::fs::write(&spec, text).unwrap();
    spec
}

#[test]
fn the_readiness_error_names_the_address_of_the_users_url() {
    let dir = tempfile::tempdir().unwrap();
    let spec = never_ready_spec(dir.path(), "http://127.0.0.1:{port}/");
    let out = common::run_spec(&spec, &dir.path().join("picked"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let re = regex::Regex::new(
        r"nothing answered at 127\.0\.0\.1:\d+ \(from url http://127\.0\.0\.1:\{port\}/\)",
    )
    .unwrap();
    assert!(re.is_match(&stderr), "{stderr}");

    // A fixed address in the url is the one probed and named, whatever port was picked.
    let port = common::free_port();
    let spec = never_ready_spec(dir.path(), &format!("http://127.0.0.1:{port}/"));
    let out = common::run_spec(&spec, &dir.path().join("fixed"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "nothing answered at 127.0.0.1:{port} (from url http://127.0.0.1:{port}/)"
        )),
        "{stderr}"
    );
}
