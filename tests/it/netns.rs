//! Test hosts made on this machine: network namespaces joined to a client namespace by veth
//! pairs, each running Debian's sshd with keys generated for the test.
//!
//! Addresses (10.213.N.0/30, one per pair) exist only inside the namespaces a lab creates: the
//! test body runs on a thread moved into the lab's client namespace, so its ssh reaches the
//! hosts and nothing else. The client namespace forwards between the pairs, so hosts reach
//! each other too (a client group on one host loads a server on another). `Lab` ends every process in its namespaces and deletes them when
//! dropped, also when the test panics.

#![allow(dead_code)] // each test uses its own part of the lab

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sched::{setns, CloneFlags};
use stairbench::remote::HostSpec;

const SSHD: &str = "/usr/sbin/sshd";

static LAB_COUNT: AtomicUsize = AtomicUsize::new(0);

/// One namespace of a lab.
pub struct LabHost {
    /// The namespace's name (`ip netns`).
    pub ns: String,
    /// The host's address on its veth pair.
    pub address: Ipv4Addr,
    /// How stairbench reaches it.
    pub spec: HostSpec,
    /// The pid of its sshd listener (None for a host without sshd).
    pub sshd_pid: Option<u32>,
}

/// A client namespace and host namespaces, torn down on drop.
pub struct Lab {
    pub dir: tempfile::TempDir,
    pub hosts: Vec<LabHost>,
    tag: String,
    client_ns: String,
    namespaces: Vec<String>,
    sshds: Vec<Child>,
}

/// Why the lab cannot be built here, or `None` when it can.
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: network namespaces need CAP_SYS_ADMIN".into());
    }
    for program in ["ip", "ssh", "scp", "ssh-keygen"] {
        if !runs(Command::new(program).arg("-V")) && !on_path(program) {
            return Some(format!(
                "{program} is not installed (openssh-client, iproute2)"
            ));
        }
    }
    if !Path::new(SSHD).is_file() {
        return Some(format!(
            "{SSHD} is missing (apt-get install openssh-server)"
        ));
    }
    // One name per call: tests run in parallel, and a second `add` of one name fails.
    static PROBES: AtomicUsize = AtomicUsize::new(0);
    let n = PROBES.fetch_add(1, Ordering::SeqCst);
    let probe = format!("sbprobe-{}-{n}", std::process::id());
    if !runs(Command::new("ip").args(["netns", "add", &probe])) {
        return Some("`ip netns add` fails here (no CAP_SYS_ADMIN?)".into());
    }
    let _ = Command::new("ip").args(["netns", "del", &probe]).status();
    None
}

/// Runs `body` on a thread inside a new lab with sshd on `names` and, for each of
/// `dead_names`, a namespace whose address answers nothing. Skips (prints why and returns) when
/// the machine does not allow it, and fails in CI ([`crate::common::skip_or_fail`]).
pub fn with_lab(names: &[&str], dead_names: &[&str], body: impl FnOnce(&Lab) + Send + 'static) {
    if let Some(why) = skip_reason() {
        crate::common::skip_or_fail(why);
        return;
    }
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let dead: Vec<String> = dead_names.iter().map(|s| s.to_string()).collect();
    let thread = std::thread::spawn(move || {
        let lab = Lab::new(&names, &dead);
        body(&lab);
    });
    if let Err(panic) = thread.join() {
        std::panic::resume_unwind(panic);
    }
}

impl Lab {
    /// Builds the lab and moves the calling thread into its client namespace.
    fn new(names: &[String], dead: &[String]) -> Lab {
        let n = LAB_COUNT.fetch_add(1, Ordering::SeqCst);
        remove_stale_labs();
        let tag = format!("{:x}x{n}", std::process::id());
        let mut lab = Lab {
            dir: tempfile::tempdir().unwrap(),
            hosts: Vec::new(),
            client_ns: format!("sbt-{tag}-client"),
            tag,
            namespaces: Vec::new(),
            sshds: Vec::new(),
        };
        lab.add_namespace(&lab.client_ns.clone());
        lab.enter_client_namespace();
        // /proc/sys/net is the calling thread's namespace's: the client one now.
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").expect("enable forwarding");
        lab.make_keys();
        std::fs::create_dir_all("/run/sshd").unwrap(); // sshd's privilege separation directory
        for name in names {
            lab.add_host(name, true);
        }
        for name in dead {
            lab.add_host(name, false);
        }
        for host in &lab.hosts {
            if host.sshd_pid.is_some() {
                wait_for_port(
                    host.address,
                    &lab.dir.path().join(format!("{}.log", host.spec.name)),
                );
            }
        }
        lab
    }

    /// The host called `name`.
    pub fn host(&self, name: &str) -> &LabHost {
        self.hosts.iter().find(|h| h.spec.name == name).unwrap()
    }

    fn add_namespace(&mut self, ns: &str) {
        ip(&["netns", "add", ns]);
        self.namespaces.push(ns.into());
        ip(&["-n", ns, "link", "set", "lo", "up"]);
    }

    fn enter_client_namespace(&self) {
        let file = File::open(format!("/var/run/netns/{}", self.client_ns)).unwrap();
        setns(file, CloneFlags::CLONE_NEWNET).expect("setns into the client namespace");
    }

    fn make_keys(&self) {
        for key in ["host_key", "client_key"] {
            let path = self.dir.path().join(key);
            let ok = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(&path)
                .status()
                .unwrap()
                .success();
            assert!(ok, "ssh-keygen {key}");
        }
        std::fs::copy(
            self.dir.path().join("client_key.pub"),
            self.dir.path().join("authorized_keys"),
        )
        .unwrap();
    }

    fn add_host(&mut self, name: &str, with_sshd: bool) {
        let i = self.hosts.len() + 1;
        let ns = format!("sbt-{}-{name}", self.tag);
        self.add_namespace(&ns);
        let (client_if, host_if) = (format!("sb{}c{i}", self.tag), format!("sb{}h{i}", self.tag));
        ip(&[
            "link",
            "add",
            &client_if,
            "netns",
            &self.client_ns,
            "type",
            "veth",
            "peer",
            "name",
            &host_if,
            "netns",
            &ns,
        ]);
        let address = Ipv4Addr::new(10, 213, i as u8, 2);
        ip(&[
            "-n",
            &self.client_ns,
            "addr",
            "add",
            &format!("10.213.{i}.1/30"),
            "dev",
            &client_if,
        ]);
        ip(&["-n", &self.client_ns, "link", "set", &client_if, "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{address}/30"),
            "dev",
            &host_if,
        ]);
        ip(&["-n", &ns, "link", "set", &host_if, "up"]);
        // Hosts reach each other through the client namespace (which forwards).
        ip(&[
            "-n",
            &ns,
            "route",
            "add",
            "default",
            "via",
            &format!("10.213.{i}.1"),
        ]);
        let sshd_pid = with_sshd.then(|| self.start_sshd(name, &ns, address));
        let spec = self.spec(name, address);
        self.hosts.push(LabHost {
            ns,
            address,
            spec,
            sshd_pid,
        });
    }

    fn spec(&self, name: &str, address: Ipv4Addr) -> HostSpec {
        HostSpec {
            identity_file: Some(self.dir.path().join("client_key")),
            workdir: self.dir.path().join(format!("work-{name}")),
            known_hosts_file: Some(self.dir.path().join("known_hosts")),
            ..HostSpec::parse(name, &format!("ssh://root@{address}:22")).unwrap()
        }
    }

    fn start_sshd(&mut self, name: &str, ns: &str, address: Ipv4Addr) -> u32 {
        let dir = self.dir.path();
        let config = dir.join(format!("sshd-{name}.conf"));
        std::fs::write(&config, sshd_config(dir, address)).unwrap();
        let log = File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new("ip")
            .args(["netns", "exec", ns, SSHD, "-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let pid = child.id();
        self.sshds.push(child);
        pid
    }
}

fn sshd_config(dir: &Path, address: Ipv4Addr) -> String {
    format!(
        "ListenAddress {address}:22\n\
         HostKey {}\n\
         AuthorizedKeysFile {}\n\
         PidFile none\n\
         PermitRootLogin prohibit-password\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         StrictModes no\n\
         Subsystem sftp /usr/lib/openssh/sftp-server\n\
         LogLevel ERROR\n",
        dir.join("host_key").display(),
        dir.join("authorized_keys").display(),
    )
}

fn wait_for_port(address: Ipv4Addr, log: &Path) {
    let target = SocketAddr::from((address, 22));
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&target, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "sshd on {address} did not listen; its log: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ends and deletes the namespaces of labs whose test process died without tearing them down
/// (killed with SIGKILL): their names hold the dead pid in hex, `sbt-<pid>x<n>-...`.
fn remove_stale_labs() {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let ns = line.split_whitespace().next().unwrap_or("");
        let Some(pid) = ns
            .strip_prefix("sbt-")
            .and_then(|rest| rest.split_once('x'))
            .and_then(|(pid, _)| u32::from_str_radix(pid, 16).ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            kill_all_in(ns);
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn kill_all_in(ns: &str) {
    let me = std::process::id();
    for pid in ns_pids(ns).into_iter().filter(|&p| p != me) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The pids in namespace `ns` (`ip netns pids`).
pub fn ns_pids(ns: &str) -> Vec<u32> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// The pids in `ns` whose command name is `comm`.
pub fn ns_pids_named(ns: &str, comm: &str) -> Vec<u32> {
    ns_pids(ns)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
        .collect()
}

/// Waits up to `timeout` for `count` processes named `comm` in `ns`; returns their pids.
pub fn wait_for_named(ns: &str, comm: &str, count: usize, timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = ns_pids_named(ns, comm);
        if pids.len() >= count || Instant::now() >= deadline {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `timeout` for `ns` to hold only `keep`; returns what it holds at the end.
pub fn wait_ns_holds_only(ns: &str, keep: &[u32], timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        let extra: Vec<u32> = ns_pids(ns)
            .into_iter()
            .filter(|p| !keep.contains(p))
            .collect();
        if extra.is_empty() || Instant::now() >= deadline {
            return extra;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `comm` and command line of a pid, for messages.
pub fn describe(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    format!(
        "{pid} {:?}",
        String::from_utf8_lossy(&cmdline).replace('\0', " ")
    )
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn runs(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn on_path(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .any(|dir| dir.join(program).is_file())
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.sshds {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in &self.namespaces {
            kill_all_in(ns);
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}
