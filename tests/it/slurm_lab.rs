//! A Slurm cluster made on this machine from Debian's packages (`slurmctld`, `slurmd`,
//! `slurm-client`, `munge`), on the namespace hosts of [`crate::netns`]: slurmctld in the
//! client namespace (where the test body runs), one `slurmd` in each host namespace, one
//! munged for all of them (its socket is a file, and files cross network namespaces).
//!
//! Every file (slurm.conf, munge key and socket, state, spool and logs) lives in the cluster's
//! temporary directory under /var/tmp, and every Slurm command the test runs gets `SLURM_CONF`
//! pointing there: nothing under /etc is read or written. Each slurmd runs in its own UTS
//! namespace named after its node, so `srun hostname` answers `h1`, `h2`, ..., and its own
//! mount namespace with an empty tmpfs on /tmp: as on a real cluster, /tmp is each node's own
//! (what this machine keeps in /tmp, a node cannot see), the rest of the filesystem is shared
//! (as a cluster shares home directories). The daemons are killed when the
//! cluster is dropped (also on panic), before the lab deletes the namespaces; anything a job
//! step left in a host namespace dies with it.

#![allow(dead_code)] // each test uses its own part of the cluster

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::netns::{self, with_lab, Lab};

const DAEMONS: [&str; 3] = [
    "/usr/sbin/slurmctld",
    "/usr/sbin/slurmd",
    "/usr/sbin/munged",
];
const CLIENTS: [&str; 7] = [
    "srun", "salloc", "sbcast", "scontrol", "scancel", "squeue", "sinfo",
];
/// The controller's own host name (in its UTS namespace): what `SlurmctldHost` names.
const CONTROLLER: &str = "sbctl";
/// How long the whole cluster may take to come up before the test fails with the logs.
const UP_TIMEOUT: Duration = Duration::from_secs(60);

/// A started cluster; its daemons end when it is dropped.
pub struct SlurmLab<'a> {
    /// The namespace lab the nodes live in.
    pub lab: &'a Lab,
    /// This cluster's files: slurm.conf, munge key and socket, state, spool, logs (under
    /// /var/tmp, which the nodes share; /tmp they do not).
    pub dir: PathBuf,
    _dir: tempfile::TempDir,
    /// The generated slurm.conf (what `SLURM_CONF` points at).
    pub conf: PathBuf,
    /// Node names, in the partition's order (h1, h2, ...).
    pub nodes: Vec<String>,
    /// Seconds from the first daemon started to every node idle.
    pub up_s: f64,
    munged: Option<Child>,
    slurmctld: Option<Child>,
    /// One slurmd per node, by index into `nodes` (None once killed by a test).
    slurmds: Vec<Option<Child>>,
}

/// Why the cluster cannot be built here, or `None` when it can.
pub fn skip_reason() -> Option<String> {
    if let Some(why) = netns::skip_reason() {
        return Some(why);
    }
    for daemon in DAEMONS {
        if !Path::new(daemon).is_file() {
            return Some(format!(
                "{daemon} is missing (apt-get install slurmctld slurmd munge)"
            ));
        }
    }
    for program in CLIENTS {
        if crate::common::find_program(program).is_none() {
            return Some(format!(
                "{program} is missing (apt-get install slurm-client)"
            ));
        }
    }
    None
}

/// Runs `body` inside a lab of `n` namespace hosts `h1..hN` (each with sshd, as
/// [`crate::netns`] makes them) that form a started Slurm cluster. Skips with the reason when
/// the machine cannot (fails in CI).
pub fn with_slurm(n: usize, body: impl FnOnce(&mut SlurmLab) + Send + 'static) {
    if let Some(why) = skip_reason() {
        crate::common::skip_or_fail(why);
        return;
    }
    let names: Vec<String> = (1..=n).map(|i| format!("h{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    with_lab(&names, &[], move |lab| {
        let mut cluster = SlurmLab::start(lab);
        eprintln!(
            "slurm lab: {} nodes up in {:.2} s",
            cluster.nodes.len(),
            cluster.up_s
        );
        body(&mut cluster);
    });
}

impl<'a> SlurmLab<'a> {
    /// Writes the configuration, starts munged, slurmctld and the slurmds, and waits until
    /// every node is idle.
    fn start(lab: &'a Lab) -> SlurmLab<'a> {
        let tmp = tempfile::Builder::new()
            .prefix("sbslurm-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("state")).unwrap();
        let nodes: Vec<String> = lab.hosts.iter().map(|h| h.spec.name.clone()).collect();
        for node in &nodes {
            std::fs::create_dir_all(dir.join(format!("spool-{node}"))).unwrap();
        }
        let conf = dir.join("slurm.conf");
        let mut cluster = SlurmLab {
            lab,
            dir,
            _dir: tmp,
            conf,
            nodes,
            up_s: 0.0,
            munged: None,
            slurmctld: None,
            slurmds: Vec::new(),
        };
        std::fs::write(&cluster.conf, cluster.slurm_conf()).unwrap();
        let started = Instant::now();
        cluster.start_munged();
        cluster.start_slurmctld();
        for i in 0..cluster.nodes.len() {
            let child = cluster.start_slurmd(i);
            cluster.slurmds.push(Some(child));
        }
        cluster.wait_all_idle(started);
        cluster.up_s = started.elapsed().as_secs_f64();
        cluster
    }

    fn controller_address(&self) -> Ipv4Addr {
        // The client namespace's end of the first host's pair: every host routes to it.
        let o = self.lab.hosts[0].address.octets();
        Ipv4Addr::new(o[0], o[1], o[2], 1)
    }

    fn munge_socket(&self) -> PathBuf {
        self.dir.join("munge.socket")
    }

    fn slurm_conf(&self) -> String {
        let d = self.dir.display();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut conf = format!(
            "# Written by the stairbench test lab: a cluster on network namespaces.\n\
             ClusterName=sblab\n\
             SlurmctldHost={CONTROLLER}({ctl})\n\
             SlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nCredType=cred/munge\n\
             AuthInfo=socket={munge}\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             SwitchType=switch/none\nMpiDefault=none\nMailProg=/bin/true\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             SchedulerType=sched/builtin\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             ReturnToService=2\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool-%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\n\
             SlurmctldTimeout=10\nSlurmdTimeout=5\nMessageTimeout=5\n\
             InactiveLimit=0\nKillWait=2\nMinJobAge=2\nWaittime=0\n",
            ctl = self.controller_address(),
            munge = self.munge_socket().display(),
        );
        for host in &self.lab.hosts {
            conf += &format!(
                "NodeName={} NodeAddr={} CPUs={cpus} State=UNKNOWN\n",
                host.spec.name, host.address
            );
        }
        conf += &format!(
            "PartitionName=lab Nodes={} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
            self.nodes.join(",")
        );
        conf
    }

    fn start_munged(&mut self) {
        let key = self.dir.join("munge.key");
        let mut bytes = vec![0u8; 1024];
        File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut bytes)
            .unwrap();
        std::fs::write(&key, &bytes).unwrap();
        // munged refuses a key that others may read.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let d = &self.dir;
        let child = Command::new("/usr/sbin/munged")
            .arg("--foreground")
            .arg("--force") // as root, and in a directory others cannot enter
            .arg(format!("--socket={}", self.munge_socket().display()))
            .arg(format!("--key-file={}", key.display()))
            .arg(format!("--pid-file={}", d.join("munged.pid").display()))
            .arg(format!("--log-file={}", d.join("munged.log").display()))
            .arg(format!("--seed-file={}", d.join("munged.seed").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&d.join("munged.out")))
            .spawn()
            .expect("start munged");
        self.munged = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.munge_socket().exists() {
            assert!(
                Instant::now() < deadline,
                "munged made no socket; its log: {}",
                self.log("munged.log")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn start_slurmctld(&mut self) {
        let mut cmd = Command::new("/usr/sbin/slurmctld");
        cmd.args(["-D", "-i", "-f"]).arg(&self.conf);
        in_namespaces(&mut cmd, None, CONTROLLER, false);
        let child = self
            .daemon(&mut cmd, "slurmctld.out")
            .spawn()
            .expect("start slurmctld");
        self.slurmctld = Some(child);
    }

    /// Starts node `i`'s slurmd in its host's network namespace and a UTS namespace of its name.
    pub fn start_slurmd(&self, i: usize) -> Child {
        let node = &self.nodes[i];
        let mut cmd = Command::new("/usr/sbin/slurmd");
        cmd.args(["-D", "-N", node, "-f"]).arg(&self.conf);
        let netns = File::open(format!("/var/run/netns/{}", self.lab.hosts[i].ns)).unwrap();
        in_namespaces(&mut cmd, Some(netns), node, true);
        self.daemon(&mut cmd, &format!("slurmd-{node}.out"))
            .spawn()
            .expect("start slurmd")
    }

    fn daemon<'c>(&self, cmd: &'c mut Command, out: &str) -> &'c mut Command {
        cmd.env("SLURM_CONF", &self.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&self.dir.join(out)))
    }

    fn wait_all_idle(&self, started: Instant) {
        loop {
            let states = self.node_states();
            if states.len() == self.nodes.len() && states.iter().all(|(_, s)| s == "idle") {
                return;
            }
            assert!(
                started.elapsed() < UP_TIMEOUT,
                "the Slurm lab did not come up within {UP_TIMEOUT:?}: nodes {states:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `(node, state)` as sinfo reports them (`idle`, `alloc`, `down*`, ...).
    pub fn node_states(&self) -> Vec<(String, String)> {
        let out = self
            .command("sinfo")
            .args(["-h", "-N", "-o", "%N %T"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect()
    }

    /// A Slurm client command (`srun`, `salloc`, ...) for this cluster: `SLURM_CONF` set, and
    /// no `SLURM_*` variable of an allocation the test itself might run in.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("SLURM_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("SLURM_CONF", &self.conf).stdin(Stdio::null());
        cmd
    }

    /// Runs a Slurm client command to its end, bounded by `limit` (`timeout -s KILL`).
    pub fn run(&self, limit: Duration, program: &str, args: &[&str]) -> Output {
        let mut cmd = self.command("timeout");
        cmd.args(["-s", "KILL", &format!("{}", limit.as_secs_f64()), program])
            .args(args);
        cmd.output().unwrap()
    }

    /// Kills node `i`'s slurmd (SIGKILL): its job steps' slurmstepd and tasks go on.
    pub fn kill_slurmd(&mut self, i: usize) {
        if let Some(mut child) = self.slurmds[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Node `i` is lost: its slurmd, its job steps' slurmstepd and their tasks are killed
    /// (SIGKILL), as when the machine dies; its sshd is left alone.
    pub fn lose_node(&mut self, i: usize) {
        self.kill_slurmd(i);
        let ns = &self.lab.hosts[i].ns;
        for pid in crate::netns::ns_pids(ns) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() != "sshd" {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }

    /// A file of the cluster's directory, for messages.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }

    /// The tails of every daemon's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut names = vec!["munged.log".to_string(), "slurmctld.log".into()];
        names.extend(self.nodes.iter().map(|n| format!("slurmd-{n}.log")));
        names.extend(["slurmctld.out".to_string()]);
        names.extend(self.nodes.iter().map(|n| format!("slurmd-{n}.out")));
        let mut text = String::new();
        for name in names {
            let log = self.log(&name);
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(15)..].join("\n");
            text += &format!("--- {name}:\n{tail}\n");
        }
        text
    }
}

/// Makes `cmd` run in network namespace `netns` (None: the caller's) and a new UTS namespace
/// whose host name is `hostname`; with `own_tmp`, also in a mount namespace of its own with
/// an empty tmpfs on /tmp.
fn in_namespaces(cmd: &mut Command, netns: Option<File>, hostname: &str, own_tmp: bool) {
    let name = CString::new(hostname).unwrap();
    let [root, tmp, tmpfs, options] =
        ["/", "/tmp", "tmpfs", "mode=1777"].map(|s| CString::new(s).unwrap());
    // SAFETY: between fork and exec only async-signal-safe system calls run (setns, unshare,
    // sethostname, mount) on memory allocated before the fork; the namespace file was opened
    // before the fork and stays open until exec.
    unsafe {
        cmd.pre_exec(move || {
            let fail = || Err(std::io::Error::last_os_error());
            if let Some(file) = &netns {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return fail();
                }
            }
            let flags = libc::CLONE_NEWUTS | if own_tmp { libc::CLONE_NEWNS } else { 0 };
            if libc::unshare(flags) != 0
                || libc::sethostname(name.as_ptr(), name.as_bytes().len()) != 0
            {
                return fail();
            }
            if own_tmp {
                // Private first, so the tmpfs does not propagate back to this machine's /tmp.
                let private = libc::MS_REC | libc::MS_PRIVATE;
                if libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    private,
                    std::ptr::null(),
                ) != 0
                    || libc::mount(
                        tmpfs.as_ptr(),
                        tmp.as_ptr(),
                        tmpfs.as_ptr(),
                        0,
                        options.as_ptr().cast(),
                    ) != 0
                {
                    return fail();
                }
            }
            Ok(())
        });
    }
}

fn log_file(path: &Path) -> File {
    File::create(path).unwrap()
}

impl Drop for SlurmLab<'_> {
    fn drop(&mut self) {
        // slurmds first (their steps die with the lab's namespaces), then the controller,
        // then munged, which both of them use until they end.
        let children = self
            .slurmds
            .iter_mut()
            .filter_map(Option::take)
            .chain(self.slurmctld.take())
            .chain(self.munged.take());
        for mut child in children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
