use super::*;

const ESTABLISHED: u8 = 1;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn sock(state: u8, local: &str, remote: &str, rx: u64, inode: u64) -> Sock {
    Sock {
        state,
        local: addr(local),
        remote: addr(remote),
        rx,
        tx: if state == LISTEN { 511 } else { 0 },
        inode,
    }
}

/// A proxy (inodes 10..) on port 80 with a client, connected three times to an upstream on
/// port 8000 (listener 20): one connection accepted and holding a request, two in the
/// upstream's accept queue.
fn proxy_and_upstream() -> Sockets {
    Sockets::new(vec![
        sock(LISTEN, "0.0.0.0:80", "0.0.0.0:0", 0, 10),
        sock(ESTABLISHED, "127.0.0.1:80", "127.0.0.1:40000", 0, 11),
        sock(ESTABLISHED, "127.0.0.1:40000", "127.0.0.1:80", 0, 99),
        sock(LISTEN, "127.0.0.1:8000", "0.0.0.0:0", 2, 20),
        sock(ESTABLISHED, "127.0.0.1:50001", "127.0.0.1:8000", 0, 12),
        sock(ESTABLISHED, "127.0.0.1:8000", "127.0.0.1:50001", 78, 21),
        sock(ESTABLISHED, "127.0.0.1:50002", "127.0.0.1:8000", 0, 13),
        sock(ESTABLISHED, "127.0.0.1:8000", "127.0.0.1:50002", 78, 0),
        sock(ESTABLISHED, "127.0.0.1:50003", "127.0.0.1:8000", 0, 14),
        sock(ESTABLISHED, "127.0.0.1:8000", "127.0.0.1:50003", 0, 0),
    ])
}

#[test]
fn a_proxys_own_connections_lead_to_its_upstream_and_its_queues() {
    let s = proxy_and_upstream();
    let proxy: BTreeMap<u64, i32> = [(10, 1), (11, 1), (12, 1), (13, 1), (14, 2)].into();
    let out = s.outgoing(&proxy);
    // The client's connection was accepted by the proxy's listener: not the proxy's own.
    assert_eq!(out.len(), 1, "{out:?}");
    let (to, conns) = &out[0];
    assert_eq!(*to, addr("127.0.0.1:8000"));
    assert_eq!(most_common_pid(conns), 1);
    let ends: Vec<Sock> = conns.iter().map(|c| c.1).collect();
    let q = s.queues(*to, &ends);
    // The end still in the accept queue (no inode) counts there, not as unread.
    assert_eq!(
        q,
        Queues {
            connections: 3,
            accept_queue: 2,
            backlog: Some(511),
            unread: 1
        }
    );
    assert!(s.accepted_inode(21) && !s.accepted_inode(12));
    // The upstream's own sockets open nothing: its accepted ends are not outgoing.
    let upstream: BTreeMap<u64, i32> = [(20, 3), (21, 3)].into();
    assert!(s.outgoing(&upstream).is_empty());
}

#[test]
fn a_wildcard_listener_takes_connections_to_any_of_its_addresses() {
    let s = Sockets::new(vec![
        sock(LISTEN, "0.0.0.0:6379", "0.0.0.0:0", 4, 30),
        sock(LISTEN, "10.0.0.1:6380", "0.0.0.0:0", 0, 31),
    ]);
    assert_eq!(s.listener(addr("127.0.0.1:6379")).unwrap().inode, 30);
    assert!(s.listener(addr("127.0.0.1:6380")).is_none());
    assert!(s.listener(addr("127.0.0.1:1")).is_none());
}

#[test]
fn an_interpreters_command_names_what_it_runs() {
    let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let py = v(&["/usr/bin/python3", "-m", "gunicorn", "--workers", "2"]);
    assert_eq!(short_command("python3", &py), "python3 -m gunicorn");
    let node = v(&["node", "/srv/app/server.js"]);
    assert_eq!(short_command("node", &node), "node server.js");
    let nginx = v(&["nginx: master process nginx", "-c", "x"]);
    assert_eq!(short_command("nginx", &nginx), "nginx");
    assert_eq!(short_command("redis-server", &[]), "redis-server");
}

/// A real process (bash) holding three connections to a listener of this test: the hop is
/// found with its holder, its accept queue and the one connection accepted with a request
/// unread, as the kernel reports them.
#[test]
fn a_processs_connections_are_followed_to_the_listener_that_holds_them() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} 4<>/dev/tcp/127.0.0.1/{port} 5<>/dev/tcp/127.0.0.1/{port}; echo hi >&3; echo hi >&4; echo hi >&5; sleep 5"
    );
    let Ok(mut child) = std::process::Command::new("bash")
        .args(["-c", &script])
        .spawn()
    else {
        panic!("no bash");
    };
    let diag = diag::open().unwrap();
    let to = addr(&format!("127.0.0.1:{port}"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while Sockets::new(diag::dump_all(&diag).unwrap())
        .listener(to)
        .map_or(0, |l| l.rx)
        < 3
    {
        assert!(Instant::now() < deadline, "bash never connected");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_accepted, _) = listener.accept().unwrap();
    // The accepted end holds the 3 bytes bash wrote; wait until the kernel shows them.
    std::thread::sleep(Duration::from_millis(50));
    let mut f = Follower::new(child.id() as i32);
    // This test process holds the listener: let it be followed as any other would be.
    f.own_pid = 0;
    assert!(f.sample(
        &Sockets::new(diag::dump_all(&diag).unwrap()),
        BTreeMap::new(),
        true
    ));
    let _ = child.kill();
    let _ = child.wait();
    let hops = f.finish();
    let hop = hops
        .iter()
        .find(|h| h.addr == to.to_string())
        .unwrap_or_else(|| panic!("{hops:#?}"));
    assert_eq!(hop.depth, 1);
    assert_eq!(hop.pid, Some(std::process::id() as i32), "{hop:#?}");
    assert!(!hop.in_tree);
    assert_eq!(hop.from_pid, child.id() as i32);
    assert_eq!(hop.connections_mean, 3.0, "{hop:#?}");
    assert_eq!(hop.accept_queue_mean, 2.0, "{hop:#?}");
    assert_eq!(hop.unread_connections_mean, 1.0, "{hop:#?}");
    assert!(hop.accept_backlog.is_some_and(|b| b >= 1), "{hop:#?}");
    assert!(hop.cpu_pct.is_some() && hop.threads >= 1, "{hop:#?}");
    assert!(hop.in_service_mean.is_some(), "{hop:#?}");
}
