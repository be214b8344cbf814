use super::*;

const READ: i64 = libc::SYS_read;
const FSYNC: i64 = libc::SYS_fsync;
const FUTEX: i64 = libc::SYS_futex;
const EPOLL: i64 = libc::SYS_epoll_pwait;
const ACCEPT: i64 = libc::SYS_accept4;
const SLEEP: i64 = libc::SYS_clock_nanosleep;

#[test]
fn each_wait_is_classified_by_its_call_and_descriptor() {
    let s = Role::Server;
    let sock = Some(FdKind::Socket(7));
    assert_eq!(
        classify(s, b'D', Some(FSYNC), Some(FdKind::Storage), ""),
        Wait::Storage
    );
    assert_eq!(
        classify(s, b'S', Some(READ), Some(FdKind::Storage), ""),
        Wait::Storage
    );
    assert_eq!(classify(s, b'S', Some(FUTEX), None, ""), Wait::Lock);
    assert_eq!(classify(s, b'S', Some(READ), sock, ""), Wait::SocketRead(7));
    let write = libc::SYS_sendto;
    assert_eq!(classify(s, b'S', Some(write), sock, ""), Wait::Socket(7));
    assert_eq!(classify(s, b'S', Some(EPOLL), None, ""), Wait::Idle);
    assert_eq!(classify(s, b'S', Some(ACCEPT), sock, ""), Wait::Idle);
    // The load generator's event loop waits on the server.
    assert_eq!(
        classify(Role::Client, b'S', Some(EPOLL), sock, ""),
        Wait::Socket(7)
    );
    assert_eq!(classify(s, b'S', Some(SLEEP), None, ""), Wait::Other);
    assert_eq!(
        classify(s, b'S', Some(READ), Some(FdKind::Other), ""),
        Wait::Other,
        "a pipe"
    );
    assert_eq!(
        classify(s, b'S', Some(READ), Some(FdKind::Event), ""),
        Wait::Idle
    );
    // Outside a call: a fault, on the disk or not.
    assert_eq!(classify(s, b'D', None, None, "filemap_fault"), Wait::Paging);
    assert_eq!(classify(s, b'D', None, None, "io_schedule"), Wait::Storage);
    // An unknown call in D state on block I/O is storage.
    let open = libc::SYS_openat;
    assert_eq!(
        classify(s, b'D', Some(open), None, "folio_wait_bit_common"),
        Wait::Storage
    );
    assert_eq!(classify(s, b'S', Some(open), None, ""), Wait::Other);
}

#[test]
fn fd_links_are_told_apart() {
    assert_eq!(fd_kind("socket:[123]"), FdKind::Socket(123));
    assert_eq!(fd_kind("/var/lib/db/wal"), FdKind::Storage);
    assert_eq!(fd_kind("pipe:[9]"), FdKind::Other);
    assert_eq!(fd_kind("anon_inode:[eventfd]"), FdKind::Event);
    assert_eq!(fd_kind("/dev/null"), FdKind::Other);
}

#[test]
fn stat_and_syscall_files_parse() {
    let stat = "42 (a b) S 1 42 42 0 -1 4194560 100 0 3 0 250 50 0 0 20 0 1 0 \
                100 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 7 0 0";
    let (state, c) = parse_stat(stat).unwrap();
    assert_eq!(state, b'S');
    assert_eq!((c.utime, c.stime, c.blkio_ticks), (250, 50, 7));
    assert_eq!(
        parse_syscall("74 0x3 0x0 0x0 0x0 0x0 0x0 0x7ffd 0x7f"),
        Some((Some(74), 3))
    );
    assert_eq!(parse_syscall("-1 0x7ffd 0x7f"), Some((None, 0)));
    assert_eq!(parse_syscall("running"), None);
}

#[test]
fn only_a_sleeping_thread_is_read_for_its_system_call() {
    assert_eq!(
        wait_files(b'S'),
        WaitFiles {
            syscall: true,
            wchan: false
        }
    );
    assert_eq!(
        wait_files(b'D'),
        WaitFiles {
            syscall: true,
            wchan: true
        }
    );
    for state in *b"RTtZXI" {
        assert!(!wait_files(state).syscall, "{}", state as char);
    }
    // A /proc of two threads whose syscall files both say futex: the one stat finds running
    // is not read for it (it would be a lock wait), the sleeping one is.
    let root = tempfile::tempdir().unwrap();
    for (tid, state) in [(11, 'R'), (12, 'S')] {
        let dir = root.path().join(format!("10/task/{tid}"));
        std::fs::create_dir_all(&dir).unwrap();
        let stat = format!(
            "{tid} (worker) {state} 1 10 10 0 -1 0 0 0 0 0 5 1 0 0 20 0 2 0 \
             100 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0"
        );
        std::fs::write(dir.join("stat"), stat).unwrap();
        std::fs::write(dir.join("schedstat"), "1000 200 3\n").unwrap();
        let futex = format!("{FUTEX} 0x7f00 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f01\n");
        std::fs::write(dir.join("syscall"), futex).unwrap();
    }
    let running = sampler::sample_once(root.path(), 10, 11).unwrap();
    assert!(running.is_empty(), "{running:?}");
    let sleeping = sampler::sample_once(root.path(), 10, 12).unwrap();
    assert_eq!(sleeping, BTreeMap::from([(Wait::Lock, 1)]));
}

#[test]
fn a_held_proc_file_read_from_its_start_is_fresh() {
    let tid = unsafe { libc::gettid() };
    let path = format!("/proc/self/task/{tid}/schedstat");
    let file = std::fs::File::open(path).unwrap();
    let run_ns = |f: &std::fs::File| {
        let text = sampler::read_held(f).unwrap();
        crate::machine::threads::parse_schedstat(&text).unwrap().0
    };
    let before = run_ns(&file);
    let t0 = crate::observe::thread_cpu_s();
    let mut x = 0u64;
    while crate::observe::thread_cpu_s() - t0 < 0.02 {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    let after = run_ns(&file);
    assert!(
        after >= before + 15_000_000,
        "20 ms of CPU on this thread: {before} then {after} ns"
    );
}

#[test]
fn a_held_file_of_a_thread_that_ended_fails_to_read() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        tx.send(unsafe { libc::gettid() }).unwrap();
        done_rx.recv().unwrap();
    });
    let tid = rx.recv().unwrap();
    let file = std::fs::File::open(format!("/proc/self/task/{tid}/stat")).unwrap();
    assert!(sampler::read_held(&file).is_some_and(|t| t.starts_with(&format!("{tid} "))));
    done_tx.send(()).unwrap();
    worker.join().unwrap();
    // join returns when the thread has cleared its id, a moment before the kernel releases it.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while sampler::read_held(&file).is_some() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(sampler::read_held(&file), None, "thread {tid} has ended");
}

#[test]
fn held_files_leave_most_of_the_open_file_limit_to_the_load() {
    // Three files a thread within an eighth of the limit: 1024 / 8 / 3.
    assert_eq!(sampler::held_threads(1024), 42);
    assert_eq!(sampler::held_threads(20_000), 833);
    assert_eq!(sampler::held_threads(1 << 20), 2_048);
    assert_eq!(sampler::held_threads(8), 0);
}

#[test]
fn the_sampler_is_on_unless_the_variable_turns_it_off() {
    assert!(enabled_by(None));
    assert!(enabled_by(Some("1")));
    assert!(enabled_by(Some("")));
    assert!(!enabled_by(Some("0")));
    assert!(!enabled_by(Some(" Off ")));
    assert!(!enabled_by(Some("false")));
}

#[test]
fn the_plan_keeps_the_sampling_within_its_budget_at_any_size() {
    // A read of one thread's stat and syscall costs some 10-20 µs.
    for cost_s in [5e-6, 15e-6, 40e-6] {
        for threads in [1, 10, 200, 2_000, 20_000] {
            let p = plan(threads, cost_s);
            let share = p.per_pass as f64 * cost_s / p.every.as_secs_f64();
            assert!(
                share <= BUDGET_SHARE * 1.0001,
                "{threads} threads at {cost_s}: {share}"
            );
            assert!(p.every >= MIN_EVERY && p.every <= MAX_EVERY);
            assert!(p.per_pass >= 1 && p.per_pass <= threads);
        }
    }
    // Few threads: all of them, as often as allowed.
    assert_eq!(plan(10, 5e-6).per_pass, 10);
    assert_eq!(plan(10, 5e-6).every, MIN_EVERY);
    // 200 threads: all, less often, or a subset at the longest spacing.
    let p = plan(200, 15e-6);
    assert!(p.every > MIN_EVERY, "{p:?}");
    // 2,000: a rotating subset at the longest spacing, still reading a share every pass.
    let p = plan(2_000, 15e-6);
    assert_eq!(p.every, MAX_EVERY);
    assert!(p.per_pass < 2_000 && p.per_pass >= 50, "{p:?}");
}

fn tally(run_ms: u64, wait_ms: u64, waits: &[(Wait, u64)]) -> Tally {
    Tally {
        pid: 1,
        role: Some(Role::Server),
        name: "worker-1".into(),
        first: Counters::default(),
        last: Counters {
            utime: 3,
            stime: 1,
            run_ns: run_ms * 1_000_000,
            wait_ns: wait_ms * 1_000_000,
            blkio_ticks: 20,
        },
        span_s: (0.0, 2.0),
        sampled: waits.iter().map(|w| w.1).sum(),
        waits: waits.iter().copied().collect(),
    }
}

#[test]
fn sampled_shares_split_the_time_off_cpu_and_exact_figures_stay_exact() {
    let table = peers::Table::default();
    let owners = BTreeMap::new();
    let names = BTreeMap::new();
    let mut s = Summary {
        table: &table,
        owners: &owners,
        names: &names,
        ticks_per_s: 100.0,
        delayacct: false,
    };
    // 2 s alive: 0.4 s on a CPU (3:1 user:sys), 0.1 s waiting for one, 1.5 s off a CPU
    // shared 2:1 between storage and a lock.
    let t = tally(400, 100, &[(Wait::Storage, 20), (Wait::Lock, 10)]);
    let (secs, _) = s.thread(&t, &BTreeMap::new());
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(secs.on_cpu_user_s, 0.3) && close(secs.on_cpu_sys_s, 0.1));
    assert!(close(secs.runqueue_s, 0.1));
    assert!(
        close(secs.storage_s, 1.0) && close(secs.lock_s, 0.5),
        "{secs:?}"
    );
    assert!(close(secs.total_s(), 2.0));
    // Delay accounting on: 20 ticks = 0.2 s of block I/O, exact; the samples share the rest.
    s.delayacct = true;
    let (secs, _) = s.thread(&t, &BTreeMap::new());
    assert!(
        close(secs.storage_s, 0.2) && close(secs.lock_s, 1.3),
        "{secs:?}"
    );
    // A delay longer than the thread was alive is the kernel's misread (the machine's uptime
    // in ticks): its samples give its storage instead of the whole time off a CPU.
    let mut misread = t.clone();
    misread.last.blkio_ticks = 3_831_951;
    let (secs, _) = s.thread(&misread, &BTreeMap::new());
    assert!(
        close(secs.storage_s, 1.0) && close(secs.lock_s, 0.5),
        "{secs:?}"
    );
    // A thread never seen blocked: its time off a CPU is `other`, not lost.
    s.delayacct = false;
    let (secs, _) = s.thread(&tally(400, 100, &[]), &BTreeMap::new());
    assert!(close(secs.other_s, 1.5));
    // Unless its group's other threads were: their shares.
    let pooled = BTreeMap::from([(Wait::Lock, 3)]);
    let (secs, _) = s.thread(&tally(400, 100, &[]), &pooled);
    assert!(close(secs.lock_s, 1.5) && secs.other_s == 0.0, "{secs:?}");
}

#[test]
fn a_read_on_an_accepted_connection_is_waiting_for_work_and_threads_group_by_name() {
    let mut table = peers::Table::default();
    let mut buf = Vec::new();
    // Two messages as sock_diag sends them: a listener on :80 (inode 1) and the connection
    // it accepted from :5000 (inode 2); then the end of the dump.
    for (state, sport, dport, ino) in [(10u8, 80u16, 0u16, 1u32), (1, 80, 5000, 2)] {
        let mut m = vec![0u8; 16 + 72];
        m[0..4].copy_from_slice(&(88u32).to_ne_bytes());
        m[16] = libc::AF_INET as u8;
        m[17] = state;
        m[20..22].copy_from_slice(&sport.to_be_bytes());
        m[22..24].copy_from_slice(&dport.to_be_bytes());
        m[24..28].copy_from_slice(&[127, 0, 0, 1]);
        m[40..44].copy_from_slice(&[127, 0, 0, 1]);
        m[84..88].copy_from_slice(&ino.to_ne_bytes());
        buf.extend(m);
    }
    let mut done = vec![0u8; 16];
    done[0..4].copy_from_slice(&16u32.to_ne_bytes());
    done[4..6].copy_from_slice(&3u16.to_ne_bytes());
    buf.extend(done);
    assert!(peers::parse(&buf, &mut table).unwrap());
    assert!(table.accepted(2));
    let (owners, names) = (BTreeMap::new(), BTreeMap::from([(1, "srv".to_string())]));
    let s = Summary {
        table: &table,
        owners: &owners,
        names: &names,
        ticks_per_s: 100.0,
        delayacct: false,
    };
    let reading = tally(0, 0, &[(Wait::SocketRead(2), 10)]);
    let mut writing = tally(0, 0, &[(Wait::Socket(2), 10)]);
    writing.name = "worker-2".into();
    let groups = s.groups(&[reading, writing]);
    let g = &groups[&Role::Server];
    assert_eq!(g.len(), 1, "worker-1 and worker-2 merge");
    assert_eq!((g[0].threads, g[0].process.as_str()), (2, "srv"));
    let secs = g[0].seconds;
    assert!(
        (secs.idle_s - 2.0).abs() < 1e-9,
        "the read waits for a request"
    );
    assert!(
        (secs.socket_s - 2.0).abs() < 1e-9,
        "the write waits on the client"
    );
    assert_eq!(g[0].peers.len(), 1);
    assert_eq!(g[0].peers[0].addr, "127.0.0.1:5000");
}
