//! Thread-state analysis on real processes, each truth known by construction: a thread in
//! fsync on the real disk, one blocked on a lock another holds, one waiting on a local peer
//! that sleeps before answering, a spinning thread, an idle accept and epoll server, the
//! load generator's own threads waiting on their server, and 200 threads within the budget.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use stairbench::observe::thread_states::{self, Targets, ThreadStateWatch};
use stairbench::record::observed::{StateSeconds, ThreadStateGroup, ThreadStates};

use crate::common::{find_program, skip_or_fail};

/// How long each window lasts.
const WINDOW: Duration = Duration::from_millis(1500);

/// A python3 program running until dropped; its stdin held open (its main thread may wait on
/// it).
struct Py {
    child: Child,
    _stdin: ChildStdin,
    /// What it printed after `ready`, on the same line.
    said: String,
}

impl Drop for Py {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `script` under python3 and waits for its line `ready ...`; None (skipped, or a
/// failure in CI) without python3.
fn python(script: &str, args: &[&str]) -> Option<Py> {
    if find_program("python3").is_none() {
        skip_or_fail("python3 is not installed");
        return None;
    }
    let prelude = "import ctypes, os, sys, threading, time, socket, selectors\n\
                   libc = ctypes.CDLL(None)\n\
                   def name(n): libc.prctl(15, n.encode(), 0, 0, 0)\n";
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(format!("{prelude}{script}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting python3");
    let stdin = child.stdin.take().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let said = line
        .strip_prefix("ready")
        .unwrap_or_else(|| panic!("python3 said {line:?}"))
        .trim()
        .to_string();
    // The threads reach their waits.
    std::thread::sleep(Duration::from_millis(300));
    Some(Py {
        child,
        _stdin: stdin,
        said,
    })
}

/// One window over `targets`.
fn watch(targets: Targets) -> (Option<ThreadStates>, Option<ThreadStates>, f64) {
    let w = ThreadStateWatch::start(targets).unwrap();
    std::thread::sleep(WINDOW);
    let seen = w.finish();
    (seen.server, seen.client, seen.cpu_s)
}

fn server(pid: u32) -> ThreadStates {
    let (server, _, _) = watch(Targets {
        server: Some(pid as i32),
        client: false,
    });
    server.expect("the server's thread states")
}

fn group<'a>(ts: &'a ThreadStates, name: &str) -> &'a ThreadStateGroup {
    ts.groups
        .iter()
        .find(|g| g.name == name)
        .unwrap_or_else(|| panic!("no group {name}: {ts:#?}"))
}

/// `part` of the group's whole time, which is about its threads times the window.
fn share(g: &ThreadStateGroup, part: fn(&StateSeconds) -> f64) -> f64 {
    let total = g.seconds.total_s();
    assert!(
        total > 0.8 * WINDOW.as_secs_f64() * f64::from(g.threads),
        "the group's seconds do not cover its window: {g:#?}"
    );
    part(&g.seconds) / total
}

/// `part` of the group's time blocked (neither on a CPU nor waiting for one).
fn blocked_share(g: &ThreadStateGroup, part: fn(&StateSeconds) -> f64) -> f64 {
    let s = &g.seconds;
    share(g, part) * s.total_s() / (s.total_s() - s.on_cpu_user_s - s.on_cpu_sys_s - s.runqueue_s)
}

#[test]
fn a_thread_in_fsync_on_the_real_disk_is_blocked_on_storage_without_delay_accounting() {
    // /var/tmp is on the real disk here; a tmpfs would never block.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let fs = Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(dir.path())
        .output()
        .unwrap();
    let fs = String::from_utf8_lossy(&fs.stdout).trim().to_string();
    if fs == "tmpfs" || fs == "ramfs" {
        skip_or_fail(format!("/var/tmp is on {fs}: no storage to wait on"));
        return;
    }
    let path = dir.path().join("wal");
    let script = "def sync():\n    name('syncer')\n    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)\n    i = 0\n    while True:\n        os.pwrite(fd, os.urandom(4096), (i % 64) * 4096)\n        os.fsync(fd)\n        i += 1\nthreading.Thread(target=sync, daemon=True).start()\nprint('ready', flush=True)\nsys.stdin.read()\n";
    let Some(py) = python(script, &[path.to_str().unwrap()]) else {
        return;
    };
    let ts = server(py.child.id());
    let delayacct =
        std::fs::read_to_string("/proc/sys/kernel/task_delayacct").is_ok_and(|v| v.trim() == "1");
    assert_eq!(ts.delay_accounting, delayacct);
    let g = group(&ts, "syncer");
    // Of its time blocked: on a shared machine the thread also waits for a CPU a good part
    // of the window (schedstat's run-queue time, exact), which is no storage wait.
    let storage = blocked_share(g, |s| s.storage_s);
    eprintln!("syncer: {:?} (storage {storage:.2})", g.seconds);
    assert!(storage > 0.5, "fsync's waits are storage: {g:#?}");
    assert!(g.seconds.storage_s > g.seconds.lock_s + g.seconds.other_s + g.seconds.idle_s);
    // The main thread waits on a pipe: not storage.
    let main = group(&ts, "python3");
    assert!(share(main, |s| s.storage_s) < 0.2, "{main:#?}");
}

#[test]
fn a_thread_waiting_for_a_lock_another_holds_is_blocked_on_a_lock() {
    let script = "lock = threading.Lock()\nlock.acquire()\ndef wait():\n    name('waiter')\n    lock.acquire()\nthreading.Thread(target=wait, daemon=True).start()\nprint('ready', flush=True)\nsys.stdin.read()\n";
    let Some(py) = python(script, &[]) else {
        return;
    };
    let ts = server(py.child.id());
    let g = group(&ts, "waiter");
    assert!(share(g, |s| s.lock_s) > 0.9, "{g:#?}");
    // The holder waits on its stdin (a pipe): neither a lock nor a socket.
    let main = group(&ts, "python3");
    assert!(share(main, |s| s.lock_s + s.socket_s) < 0.1, "{main:#?}");
    assert!(share(main, |s| s.other_s) > 0.9, "{main:#?}");
}

/// A python3 server that accepts, reads a request and sleeps before answering.
const SLOW_SERVER: &str = "s = socket.socket()\ns.bind(('127.0.0.1', 0))\ns.listen(8)\nprint('ready', s.getsockname()[1], flush=True)\nwhile True:\n    c, _ = s.accept()\n    c.recv(100)\n    time.sleep(3600)\n";

#[test]
fn a_thread_waiting_on_a_local_peer_is_a_socket_wait_naming_its_pid_and_port() {
    let Some(upstream) = python(SLOW_SERVER, &[]) else {
        return;
    };
    let port = upstream.said.clone();
    let client = "c = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\nc.sendall(b'GET')\nprint('ready', flush=True)\nc.recv(100)\n";
    let Some(py) = python(client, &[&port]) else {
        return;
    };
    let ts = server(py.child.id());
    let g = group(&ts, "python3");
    assert!(share(g, |s| s.socket_s) > 0.9, "{g:#?}");
    let peer = &g.peers[0];
    assert_eq!(peer.addr, format!("127.0.0.1:{port}"), "{g:#?}");
    assert_eq!(peer.pid, Some(upstream.child.id() as i32), "{g:#?}");
    assert_eq!(peer.process.as_deref(), Some("python3"));
    assert!(peer.thread_s > 0.9 * g.seconds.socket_s);
    // The upstream, for its part, sleeps: not a socket wait, and no peer.
    let up = server(upstream.child.id());
    let g = group(&up, "python3");
    assert!(
        g.peers.is_empty() && share(g, |s| s.other_s) > 0.9,
        "{g:#?}"
    );
}

#[test]
fn a_spinning_thread_is_on_a_cpu() {
    let script = "def spin():\n    name('spinner')\n    while True:\n        pass\nthreading.Thread(target=spin, daemon=True).start()\nprint('ready', flush=True)\nsys.stdin.read()\n";
    let Some(py) = python(script, &[]) else {
        return;
    };
    let ts = server(py.child.id());
    let g = group(&ts, "spinner");
    let s = g.seconds;
    // On a CPU, or runnable waiting for one on a shared machine; never blocked.
    assert!(
        share(g, |s| s.on_cpu_user_s + s.on_cpu_sys_s + s.runqueue_s) > 0.9,
        "{g:#?}"
    );
    assert!(
        s.on_cpu_user_s > 5.0 * s.on_cpu_sys_s,
        "python spins in user mode: {s:?}"
    );
    assert!(s.storage_s + s.lock_s + s.socket_s + s.idle_s < 0.1 * s.total_s());
}

#[test]
fn an_idle_accept_and_event_loop_server_is_waiting_for_work() {
    let script = "a = socket.socket(); a.bind(('127.0.0.1', 0)); a.listen(8)\nb = socket.socket(); b.bind(('127.0.0.1', 0)); b.listen(8)\ndef accept():\n    name('acceptor')\n    a.accept()\ndef loop():\n    name('evloop')\n    sel = selectors.EpollSelector()\n    sel.register(b, selectors.EVENT_READ)\n    sel.select()\nthreading.Thread(target=accept, daemon=True).start()\nthreading.Thread(target=loop, daemon=True).start()\nprint('ready', b.getsockname()[1], flush=True)\nsys.stdin.read()\n";
    let Some(py) = python(script, &[]) else {
        return;
    };
    // A connection accepted and idle: reading it waits for work too.
    let script2 = "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\nprint('ready', s.getsockname()[1], flush=True)\nc, _ = s.accept()\nname('reader')\nc.recv(100)\n";
    let Some(reader) = python(script2, &[]) else {
        return;
    };
    let _conn = TcpStream::connect(("127.0.0.1", reader.said.parse::<u16>().unwrap())).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let ts = server(py.child.id());
    for name in ["acceptor", "evloop"] {
        let g = group(&ts, name);
        assert!(share(g, |s| s.idle_s) > 0.9, "{name}: {g:#?}");
    }
    let ts = server(reader.child.id());
    let g = group(&ts, "reader");
    assert!(
        share(g, |s| s.idle_s) > 0.9,
        "a read on an accepted connection: {g:#?}"
    );
    assert!(g.peers.is_empty(), "{g:#?}");
}

#[test]
fn the_load_generators_threads_waiting_on_their_server_name_it() {
    let Some(upstream) = python(SLOW_SERVER, &[]) else {
        return;
    };
    let port: u16 = upstream.said.parse().unwrap();
    // Two threads named as stairbench's load threads, in this process.
    let spawn = |k: usize| {
        std::thread::Builder::new()
            .name(format!("load-{k}"))
            .spawn(move || {
                let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
                c.write_all(b"GET").unwrap();
                c.set_read_timeout(Some(WINDOW * 3)).unwrap();
                let _ = c.read(&mut [0u8; 16]);
            })
            .unwrap()
    };
    // The slow server answers one connection at a time: the second waits in its accept
    // queue, its peer the listener.
    let threads = [spawn(0), spawn(1)];
    std::thread::sleep(Duration::from_millis(300));
    let (_, client, _) = watch(Targets {
        server: None,
        client: true,
    });
    let ts = client.expect("the load generator's thread states");
    // Other tests of this binary may run the load engine at the same time (their `load-N`
    // threads merge with these): the two threads here are known by their peer.
    let me = std::process::id() as i32;
    let g = (ts.groups.iter())
        .find(|g| g.name == "load" && g.pid == me)
        .unwrap_or_else(|| panic!("no load group: {ts:#?}"));
    assert!(g.threads >= 2, "{ts:#?}");
    let addr = format!("127.0.0.1:{port}");
    let peer = g
        .peers
        .iter()
        .find(|p| p.addr == addr)
        .unwrap_or_else(|| panic!("{g:#?}"));
    assert_eq!(peer.pid, Some(upstream.child.id() as i32), "{g:#?}");
    assert_eq!(peer.process.as_deref(), Some("python3"));
    // Both waited on it all window long.
    assert!(peer.thread_s > 0.9 * 2.0 * WINDOW.as_secs_f64(), "{g:#?}");
    // No other thread of this process (the test harness's) counts as the load generator.
    let ours = ts.groups.iter().filter(|g| g.pid == me);
    assert!(
        ours.map(|g| g.name.as_str())
            .all(|n| ["load", "kvd", "shm"].contains(&n)),
        "{ts:#?}"
    );
    drop(upstream);
    threads.into_iter().for_each(|t| t.join().unwrap());
}

#[test]
fn two_hundred_threads_are_sampled_within_the_budget() {
    let script = "ev = threading.Event()\ndef wait():\n    name('sleeper')\n    ev.wait()\nfor _ in range(200):\n    threading.Thread(target=wait, daemon=True).start()\nprint('ready', flush=True)\nsys.stdin.read()\n";
    let Some(py) = python(script, &[]) else {
        return;
    };
    let ts = server(py.child.id());
    let g = group(&ts, "sleeper");
    assert_eq!(g.threads, 200);
    assert!(
        share(g, |s| s.lock_s) > 0.9,
        "Event.wait is a futex: {g:#?}"
    );
    // The passes stretched from the shortest spacing (all 201 threads each 10 ms would read
    // 20,000 a second, some 30% of a CPU), and the reads per second stay within what the
    // budget affords at the cheapest read (5 µs).
    assert!(
        ts.sample_interval_ms > 2.0 * thread_states::MIN_EVERY.as_secs_f64() * 1e3,
        "{}",
        ts.sample_interval_ms
    );
    let per_s = ts.samples as f64 / WINDOW.as_secs_f64();
    assert!(
        per_s < thread_states::BUDGET_SHARE / 5e-6,
        "{per_s} reads a second"
    );
    // Yet the threads were read: half of them at least once on average (a read costs some
    // 100 µs in a debug build on a loaded machine: 100 a second in the budget),
    // and the threads never read took their group's shares (the lock, above).
    assert!(ts.samples >= 100, "{}", ts.samples);
}

#[test]
fn a_listener_not_owned_by_the_tree_is_not_a_client_connection() {
    // Guard for the accepted-connection rule: this process's own outbound connection to a
    // listener it also holds reads as a socket wait, its own accepted end as waiting for work.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let out = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (inbound, _) = listener.accept().unwrap();
    let mut table = thread_states::peers::Table::default();
    thread_states::peers::dump(&thread_states::peers::open().unwrap(), &mut table).unwrap();
    let ino = |addr: std::net::SocketAddr| {
        *table
            .by_inode
            .iter()
            .find(|(_, e)| e.local == addr && !e.listening)
            .unwrap()
            .0
    };
    assert!(!table.accepted(ino(out.local_addr().unwrap())));
    assert!(table.accepted(ino(inbound.local_addr().unwrap())));
}

#[test]
fn a_step_observes_thread_states_unless_the_variable_says_0() {
    // What every step does (Observer), with the environment as it is: on by default (see
    // `thread_states::enabled`), off with STAIRBENCH_THREAD_STATES=0.
    let script = "name('sleeper')\nprint('ready', flush=True)\nsys.stdin.read()\n";
    let Some(py) = python(script, &[]) else {
        return;
    };
    let observer = stairbench::observe::Observer::start(Some(py.child.id() as i32), &[0], &[1]);
    std::thread::sleep(Duration::from_millis(500));
    let obs = observer.finish();
    let set = std::env::var("STAIRBENCH_THREAD_STATES").ok();
    assert_eq!(
        obs.thread_states.is_some(),
        thread_states::enabled_by(set.as_deref()),
        "STAIRBENCH_THREAD_STATES={set:?}"
    );
    if let Some(ts) = obs.thread_states {
        assert!(ts.samples > 0, "{ts:#?}");
        group(&ts, "sleeper");
    }
}

/// A real run with thread states as they are by default (the variable unset) against the
/// built-in reactor: report.md splits each level's latency ("Where a request's time goes"), analysis.json holds
/// the budget within its schema, report.html draws both sides' charts. The server's time on a
/// CPU per request (schedstat, the sampler's) agrees with its CPU per request from the process
/// tree's utime + stime (another counter of the kernel) within 25% + 2 µs at 1 client. Catches
/// a budget not carried into the analysis or the reports, a schema that refuses it, and
/// per-request figures divided by the wrong count (a window's requests of one repetition), and
/// thread states off by default.
#[test]
fn a_run_with_thread_states_shows_where_a_requests_time_goes() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("budget.toml");
    std::fs::write(&spec, "name = \"budget\"\nwarmup = \"0s\"\nduration = \"1s\"\nclients = [1, 4]\nrepetitions = 2\nplacements = [\"shared\"]\n[[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor --threads 1\"\n").unwrap();
    let run = dir.path().join("run");
    let out = crate::common::cli_cmd()
        .env_remove("STAIRBENCH_THREAD_STATES")
        .args(["run", "-q", "--keep-disturbed"])
        .arg(&spec)
        .arg("--out")
        .arg(&run)
        .output()
        .unwrap();
    crate::common::assert_success(&out);
    let md = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(md.contains("## Where a request's time goes"), "{md}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(html.contains("where the server threads&#39; time went"));
    assert!(html.contains("where the load generator threads&#39; time went"));
    let analysis: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("analysis.json")).unwrap()).unwrap();
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/analysis.schema.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let errors = crate::schema::validate(&schema, &analysis);
    assert!(errors.is_empty(), "{errors:#?}");
    let point = &analysis["series"][0]["points"][0];
    let budget = &point["budget"];
    let per_req = &budget["server_per_req"];
    let on_cpu_us = 1e6
        * (per_req["on_cpu_user_s"].as_f64().unwrap() + per_req["on_cpu_sys_s"].as_f64().unwrap());
    // The tree's CPU per request, over the same repetitions.
    let steps = std::fs::read_to_string(run.join("steps.jsonl")).unwrap();
    let tree_us: Vec<f64> = steps
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        // A drift check (the peak measured again after a fall) is no repetition of the level.
        .filter(|s| s["clients"] == 1 && s["status"] != "failed" && s["status"] != "skipped")
        .filter(|s| s["drift_check"] != true)
        .filter_map(|s| {
            let c = &s["cpu_us_per_req"];
            Some(c["user"].as_f64()? + c["sys"].as_f64()?)
        })
        .collect();
    assert!(!tree_us.is_empty(), "{steps}");
    let tree_us = tree_us.iter().sum::<f64>() / tree_us.len() as f64;
    assert!(
        (on_cpu_us - tree_us).abs() <= 0.25 * tree_us + 2.0,
        "on a CPU {on_cpu_us:.1} µs/req by schedstat, {tree_us:.1} by the tree's CPU: {budget:#}"
    );
    assert_eq!(
        budget["requests"].as_u64().unwrap(),
        steps
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|s| s["clients"] == 1 && (s["status"] == "ok" || s["status"] == "disturbed"))
            .filter(|s| s["drift_check"] != true)
            .map(|s| s["requests"].as_u64().unwrap())
            .sum::<u64>(),
        "the level's requests are its repetitions' together"
    );
}
