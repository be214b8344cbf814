//! `stairbench serve`: runs a built-in server until SIGINT or SIGTERM. The servers and their
//! options ([`ServeCommand`] and its `*Args`) live in `serve`, since the sweep checks a spec's
//! `builtin` against them too; this is the command around them.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{SigSet, Signal};

use crate::serve::shmkv::{spawn_shmkv, ShmkvArgs};
use crate::serve::{spawn_msgr, Arch, MsgrArgs, ServeCommand};

/// Runs a built-in server until SIGINT or SIGTERM.
pub fn run(cmd: ServeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ServeCommand::Msgr(args) => msgr(&args),
        ServeCommand::Shmkv(args) => shmkv(args),
        ServeCommand::Kvd(args) => kvd(&args),
    }
}

/// Runs the messenger server until SIGINT or SIGTERM (`stairbench serve msgr`).
fn msgr(args: &MsgrArgs) -> anyhow::Result<ExitCode> {
    // Blocked before any thread starts, so every server thread inherits the mask and the
    // signals wait for the main thread's sigwait.
    let signals = block_termination()?;
    let server = spawn_msgr(args.options())?;
    let mut out = std::io::stdout().lock();
    write!(
        out,
        "listening on {} arch={} threads={}",
        server.addr(),
        args.arch.name(),
        args.threads
    )?;
    if args.arch == Arch::Pool {
        write!(out, " io-threads={}", args.io_threads)?;
    }
    writeln!(out)?;
    out.flush()?;
    drop(out);
    let signal = wait(&signals)?;
    eprintln!("{signal}: stopping");
    let stats = server.stats();
    server.stop();
    eprintln!(
        "served {} requests on {} connections ({} refused, {} truncated, {} socket errors)",
        stats.ops, stats.accepted, stats.refused, stats.truncated, stats.io_errors
    );
    Ok(ExitCode::SUCCESS)
}

/// Runs `stairbench serve shmkv` until SIGINT or SIGTERM.
fn shmkv(args: ShmkvArgs) -> anyhow::Result<ExitCode> {
    let stop = crate::signals::stop_flag();
    let server = spawn_shmkv(&args).with_context(|| format!("starting shmkv {:?}", args.name))?;
    eprintln!(
        "shmkv: serving {} ({}, {} worker{}), pid {}; clients use shm://{}",
        server.path(),
        args.arch.name(),
        args.workers,
        if args.workers == 1 { "" } else { "s" },
        std::process::id(),
        args.name
    );
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    eprintln!("shmkv: stopped; region removed");
    Ok(ExitCode::SUCCESS)
}

/// This rank as its launcher says (`--rank`, else SLURM_PROCID, OMPI_COMM_WORLD_RANK or
/// PMI_RANK): a launched rank j > 0 serves region NAME-rj, as the runner names them, so two
/// ranks on one node do not collide. Says where the rank came from.
fn launched_rank(args: &crate::serve::kvd::KvdArgs) -> anyhow::Result<crate::serve::kvd::KvdArgs> {
    use crate::serve::kvd::{resolve_rank, RankSource};
    // A single rank is rank 0 whatever task of a launcher runs it.
    let single = !args.ranks.contains(',');
    let given = if single { Some(args.rank()) } else { args.rank };
    let (rank, source) = resolve_rank(given, |v| std::env::var(v).ok())?;
    let mut args = args.clone();
    args.rank = Some(rank);
    if let RankSource::Launcher(var) = source {
        if rank > 0 {
            args.name = format!("{}-r{rank}", args.name);
        }
        say_line(&format!(
            "kvd: rank {rank} from {var}; region {}",
            args.name
        ));
    }
    Ok(args)
}

/// Runs `stairbench serve kvd` until SIGINT or SIGTERM.
fn kvd(args: &crate::serve::kvd::KvdArgs) -> anyhow::Result<ExitCode> {
    let args = &launched_rank(args)?;
    let stop = crate::signals::stop_flag();
    let mut peers = Vec::new();
    if args.spawn_peers && args.rank() == 0 {
        let exe = std::env::current_exe().context("finding this program to start the peers")?;
        for a in crate::serve::kvd::peer_args(args) {
            let child = std::process::Command::new(&exe)
                .args(&a)
                .spawn()
                .with_context(|| format!("starting the peer `{}`", a.join(" ")))?;
            let at = a
                .iter()
                .position(|w| w == "--name")
                .expect("peer_args names it");
            peers.push((child, a[at + 1].clone()));
        }
    }
    let mut peers = StopOnDrop(peers);
    let server = match crate::serve::kvd::spawn_kvd(args, stop) {
        Ok(s) => s,
        Err(crate::serve::kvd::KvdError::Stopped(_)) => {
            // The region was created before the peers were waited for; it is gone with
            // the failed start.
            say_line("kvd: stopped while connecting to its peers; region removed");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => {
            return Err(anyhow::Error::new(e))
                .with_context(|| format!("starting kvd rank {} ({:?})", args.rank(), args.name))
        }
    };
    say_line(&format!(
        "kvd: rank {} of {} serving {}, pid {}; clients use kvd://{}",
        args.rank(),
        args.ranks.split(',').count(),
        server.path(),
        std::process::id(),
        args.name
    ));
    let mut peer_exit = None;
    while !stop.load(Ordering::Relaxed) && !server.finished() && peer_exit.is_none() {
        std::thread::sleep(Duration::from_millis(50));
        peer_exit = peers.exited();
    }
    if peer_exit.is_some() {
        // Time for the daemon to read the connection's end and fail its requests.
        std::thread::sleep(Duration::from_millis(200));
    }
    let c = server.shared.counters();
    drop(server);
    say_line(&format!(
        "kvd: stopped; region removed; {} requests ({} local, {} remote), {} from peers, {} misses, {} peer_down",
        c.shm_requests, c.local, c.remote, c.incoming, c.misses, c.peer_down
    ));
    if let Some(why) = peer_exit {
        // The ranks started together are one target: one of them gone fails it, by name.
        say_line(&format!("kvd: stopping rank 0 because {why}"));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One line to stderr in one write: the ranks rank 0 starts share its stderr, and
/// `eprintln!` writes piece by piece, so their ready lines interleaved mid-line and the
/// runner's ready-line probe missed them.
fn say_line(line: &str) {
    use std::io::Write as _;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// The peers rank 0 started (with their region names): SIGTERM and reaped when it ends; the
/// region of one that was killed before it could remove it is removed then.
struct StopOnDrop(Vec<(std::process::Child, String)>);

impl StopOnDrop {
    /// The first peer that has exited, as a phrase naming it.
    fn exited(&mut self) -> Option<String> {
        self.0.iter_mut().enumerate().find_map(|(i, (c, _))| {
            let status = c.try_wait().ok()??;
            Some(format!("rank {} (pid {}) exited: {status}", i + 1, c.id()))
        })
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        for (c, _) in &self.0 {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), Signal::SIGTERM);
        }
        for (c, name) in &mut self.0 {
            let _ = c.wait();
            crate::wire::shmkv::region::remove_stale(name);
        }
    }
}

// SIGINT/SIGTERM for a server run from the command line: blocked in every thread and taken
// synchronously by the main thread with sigwait, so no handler runs in a signal context.

/// Blocks SIGINT and SIGTERM in the calling thread (and the threads it starts later).
fn block_termination() -> anyhow::Result<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("cannot block SIGINT/SIGTERM")?;
    Ok(set)
}

/// Waits for one of the blocked signals.
fn wait(set: &SigSet) -> anyhow::Result<Signal> {
    set.wait().context("waiting for SIGINT/SIGTERM failed")
}
