//! `examples/nginx-wrk.toml` measures nginx, not wrk: run in a quick mode (1-s steps, a
//! shorter staircase), few of its steps saturate wrk, the diagnosis names no client limit,
//! nginx spends more CPU per request than wrk (the costlier side its header promises), and
//! stdout has no sentence saying the series measured the load generator.

use std::path::Path;

use serde_json::Value;
use stairbench::analyze::run::diagnosis::Limit;

use crate::common;

/// CPU µs per request of a step: the server's process tree and the load generator's.
fn cpu_us_per_request(step: &Value) -> (f64, f64) {
    let requests = step["requests"].as_f64().unwrap().max(1.0);
    let server = &step["server"]["server"];
    let server_s = server["user_s"].as_f64().unwrap() + server["sys_s"].as_f64().unwrap();
    let client = &step["client_cpu"];
    let client_s = client["user_s"].as_f64().unwrap() + client["sys_s"].as_f64().unwrap();
    (server_s * 1e6 / requests, client_s * 1e6 / requests)
}

#[test]
fn the_nginx_wrk_example_measures_nginx() {
    let missing = ["nginx", "wrk"]
        .into_iter()
        .find(|p| common::find_program(p).is_none());
    if let Some(p) = missing {
        return common::skip_or_fail(format!(
            "{p} is not installed (apt-get install nginx-light wrk)"
        ));
    }
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let text = std::fs::read_to_string(examples.join("nginx-wrk.toml")).unwrap();
    let quick = text
        .replace("duration = \"5s\"", "duration = \"1s\"")
        .replace(
            "clients = [1, 2, 4, 8, 16, 32, 64]",
            "clients = [1, 2, 4, 8, 16]",
        )
        .replace("{spec_dir}", &examples.display().to_string());
    assert_ne!(
        quick,
        text.replace("{spec_dir}", &examples.display().to_string())
    );
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("nginx-wrk.toml");
    std::fs::write(&spec, quick).unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);

    let steps: Vec<Value> = common::steps_json(&out_dir)
        .into_iter()
        .filter(|s| s["status"] == "ok")
        .collect();
    assert!(steps.len() >= 3, "{stdout}");
    let saturated = steps
        .iter()
        .filter(|s| s["client_saturated"] == true)
        .count();
    assert!(
        saturated * 4 <= steps.len(),
        "{saturated} of {} steps saturated wrk",
        steps.len()
    );
    for s in &steps {
        let (server_us, client_us) = cpu_us_per_request(s);
        eprintln!(
            "{}: {:.0} req/s, nginx {server_us:.1} µs/request, wrk {client_us:.1} µs/request",
            s["id"],
            s["throughput_rps"].as_f64().unwrap()
        );
        assert!(
            server_us > client_us,
            "{}: nginx {server_us:.1} µs/request is not the costlier side (wrk {client_us:.1})",
            s["id"]
        );
    }
    let analysis = stairbench::report::analyze_run(&out_dir).unwrap();
    let diagnosis = &analysis.diagnosis[0];
    assert_ne!(diagnosis.limit, Limit::Client, "{}", diagnosis.sentence);
    assert!(
        !stdout.contains("this series measured the load generator"),
        "{stdout}"
    );
}

/// Run as root from a directory only root may enter (a clone in /root, a `mktemp -d`), the
/// example still serves its page: nginx's workers would otherwise run as an unprivileged user
/// that cannot read it, and answer every request 403.
#[test]
fn the_nginx_wrk_example_serves_its_page_from_a_directory_only_root_may_enter() {
    use std::os::unix::fs::PermissionsExt;
    // Safety: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return common::skip_or_fail("the case needs root (a directory only root may enter)");
    }
    let missing = ["nginx", "wrk"]
        .into_iter()
        .find(|p| common::find_program(p).is_none());
    if let Some(p) = missing {
        return common::skip_or_fail(common::not_installed(p));
    }
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let text = std::fs::read_to_string(examples.join("nginx-wrk.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    // The example's files copied in too, as in a clone under /root.
    let inside = dir.path().join("examples");
    std::fs::create_dir(&inside).unwrap();
    std::fs::copy(examples.join("nginx.sh"), inside.join("nginx.sh")).unwrap();
    let quick = text
        .replace("duration = \"5s\"", "duration = \"1s\"")
        .replace("clients = [1, 2, 4, 8, 16, 32, 64]", "clients = [1, 2]")
        .replace("{spec_dir}", &inside.display().to_string());
    let spec = inside.join("nginx-wrk.toml");
    std::fs::write(&spec, quick).unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 2, "{steps:#?}");
    for s in &steps {
        assert_eq!(s["status"], "ok", "{s:#}");
        assert!(s["requests"].as_f64().unwrap() > 0.0, "{s:#}");
        assert!(
            s["errors"]["http_non_2xx_3xx"].is_null(),
            "{}: {:#}",
            s["id"],
            s["errors"]
        );
    }
}
