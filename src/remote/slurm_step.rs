//! Several processes on several nodes of the allocation as ONE job step, as ranks are
//! started on a cluster: `srun --nodelist=A,B --nodes=N --ntasks=N --ntasks-per-node=1 ...`,
//! task t running its own line (the process wrapper of [`RemoteProcess`], in its node's
//! working directory). One srun carries every task's output (`--label`: `T: line`) and stdin
//! (`--input=all`): closing it stops every task, as a process's closed channel does alone.
//!
//! Which node a task lands on: Slurm numbers a step's tasks in the allocation's node order
//! (the order of `SLURM_JOB_NODELIST`), whatever order `--nodelist` gives, so the lines are
//! handed to the tasks in that order, and each line first checks it runs on its own node (a
//! cluster that numbered them otherwise fails the start with both nodes named).
//!
//! [`RemoteProcess`]: super::process::RemoteProcess

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::engine::Engine;
use super::process::{wrapper_line, Channel, RemoteProcess, Tail};
use super::shell::shell_quote;
use super::slurm::{binds_tasks, Allocation, AllocationError, Slurm, RUN_TIMEOUT, SCHEME};
use super::RemoteError;

/// The exit status of a task that landed on another node than its line's.
const WRONG_NODE: i32 = 98;

/// The nodes of `hosts` when they can be one step: at least two, every one a Slurm host, no
/// node twice; `None` otherwise (each is then started on its own).
pub fn step_nodes(hosts: &[&dyn Engine]) -> Option<Vec<String>> {
    let nodes: Vec<String> = hosts
        .iter()
        .map(|h| h.spec())
        .filter(|s| s.scheme == SCHEME)
        .filter_map(|s| s.node.clone())
        .collect();
    let mut distinct = nodes.clone();
    distinct.sort();
    distinct.dedup();
    (nodes.len() >= 2 && nodes.len() == hosts.len() && distinct.len() == nodes.len())
        .then_some(nodes)
}

/// A step node that is not in the allocation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("node {node:?} is not in the allocation ({allocation:?})")]
pub struct NotAllocated {
    /// The node.
    node: String,
    /// The allocation's nodes.
    allocation: Vec<String>,
}

/// The order of the step's tasks: `order[t]` is the index into `nodes` of task t's node,
/// tasks numbered in the allocation's node order (`allocation`); a node not in it is an error.
pub fn task_order(nodes: &[String], allocation: &[String]) -> Result<Vec<usize>, NotAllocated> {
    let place = |n: &String| {
        allocation
            .iter()
            .position(|a| a == n)
            .ok_or_else(|| NotAllocated {
                node: n.clone(),
                allocation: allocation.to_vec(),
            })
    };
    let places = nodes.iter().map(place).collect::<Result<Vec<_>, _>>()?;
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_by_key(|&i| places[i]);
    Ok(order)
}

/// The line task t runs: refuses to go on on another node than `node`, else `wrapper`.
fn task_line(node: &str, wrapper: &str) -> String {
    let node = shell_quote(node);
    format!(
        "if [ \"$SLURMD_NODENAME\" != {node} ]; then \
         echo \"Slurm started task $SLURM_PROCID on node $SLURMD_NODENAME, not on \"{node}; \
         echo 'stairbench-exit {WRONG_NODE}'; exit {WRONG_NODE}; fi; exec {wrapper}"
    )
}

/// The srun command of the step: `lines[t]` is task t's, `nodes` in task order.
pub fn step_command(job_id: &str, nodes: &[&str], lines: &[String], binds: bool) -> Command {
    let mut cmd = Command::new("srun");
    cmd.arg(format!("--jobid={job_id}"))
        .arg(format!("--nodelist={}", nodes.join(",")))
        .arg(format!("--nodes={}", nodes.len()))
        .arg(format!("--ntasks={}", nodes.len()))
        .args(["--ntasks-per-node=1", "--distribution=block", "--overlap"])
        .arg(format!("--job-name={}", Slurm::step_name()))
        .args(["--quiet", "--label", "--input=all"]);
    if binds {
        cmd.arg("--cpu-bind=none");
    }
    cmd.args([
        "sh",
        "-c",
        "shift \"$SLURM_PROCID\"; eval \"$1\"",
        "stairbench",
    ])
    .args(lines);
    cmd
}

/// Starts `commands[j]` on `hosts[j]` (Slurm hosts on distinct nodes, see [`step_nodes`]) as
/// one job step; each process is stopped with `signal`, then KILL after `grace`. Returns
/// once every task's process group exists, in `hosts`' order.
pub fn spawn_step(
    hosts: &[Arc<dyn Engine>],
    commands: &[String],
    signal: &str,
    grace: Duration,
) -> Result<Vec<RemoteProcess>, RemoteError> {
    let borrowed: Vec<&dyn Engine> = hosts.iter().map(|h| &**h).collect();
    let nodes = step_nodes(&borrowed).expect("hosts checked with step_nodes");
    let allocation = allocation().map_err(|why| hosts[0].unreachable(&why.to_string()))?;
    let order = task_order(&nodes, &allocation.nodes)
        .map_err(|why| hosts[0].unreachable(&why.to_string()))?;
    let lines: Vec<String> = (order.iter())
        .map(|&j| {
            let wrapper = wrapper_line(&hosts[j].spec().workdir, &commands[j], signal, grace);
            task_line(&nodes[j], &wrapper)
        })
        .collect();
    let task_nodes: Vec<&str> = order.iter().map(|&j| nodes[j].as_str()).collect();
    let mut child = step_command(&allocation.job_id, &task_nodes, &lines, binds_tasks())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| RemoteError::Spawn {
            program: "srun".into(),
            error,
        })?;
    // tails[j]: host j's; the task of label t is host order[t]'s.
    let tails: Vec<Arc<Mutex<Tail>>> = hosts.iter().map(|_| Arc::default()).collect();
    let by_task: Vec<Arc<Mutex<Tail>>> = order.iter().map(|&j| tails[j].clone()).collect();
    let readers = vec![
        demux(child.stdout.take().expect("piped"), by_task.clone()),
        demux(child.stderr.take().expect("piped"), by_task),
    ];
    let channel = Arc::new(Mutex::new(Channel::new(child, readers)));
    let pgids = wait_for_groups(hosts, commands, &channel, &tails)?;
    Ok((0..hosts.len())
        .map(|j| {
            let (engine, tail) = (hosts[j].clone(), tails[j].clone());
            RemoteProcess::from_task(engine, &commands[j], channel.clone(), tail, pgids[j], grace)
        })
        .collect())
}

/// The current allocation, read once (`scontrol show hostnames`).
fn allocation() -> Result<Allocation, AllocationError> {
    static CURRENT: OnceLock<Result<Allocation, AllocationError>> = OnceLock::new();
    CURRENT.get_or_init(Allocation::current).clone()
}

/// Waits (within [`RUN_TIMEOUT`]) until every task printed its group id; a task that ended
/// first fails the start with its own words, srun ending first with srun's. On failure the
/// step is ended before returning.
fn wait_for_groups(
    hosts: &[Arc<dyn Engine>],
    commands: &[String],
    channel: &Mutex<Channel>,
    tails: &[Arc<Mutex<Tail>>],
) -> Result<Vec<i32>, RemoteError> {
    let lock = |t: &Arc<Mutex<Tail>>| {
        let t = t.lock().unwrap_or_else(|e| e.into_inner());
        (t.pgid, t.exit_code, t.last(5))
    };
    let deadline = Instant::now() + RUN_TIMEOUT;
    loop {
        let running = channel.lock().unwrap_or_else(|e| e.into_inner()).running();
        let states: Vec<_> = tails.iter().map(lock).collect();
        if let Some(pgids) = states.iter().map(|s| s.0).collect::<Option<Vec<i32>>>() {
            return Ok(pgids);
        }
        let failed = states.iter().position(|s| s.0.is_none() && s.1.is_some());
        let error = match failed {
            Some(j) => Some(RemoteError::Command {
                host: hosts[j].name().to_string(),
                command: commands[j].clone(),
                code: states[j].1,
                stderr: format!("its task of the job step did not start: {}", states[j].2),
            }),
            None if !running => Some(hosts[0].unreachable(&states[0].2)),
            None if Instant::now() >= deadline => Some(hosts[0].unreachable(&format!(
                "the job step's tasks did not start within {} s",
                RUN_TIMEOUT.as_secs()
            ))),
            None => None,
        };
        if let Some(error) = error {
            let mut channel = channel.lock().unwrap_or_else(|e| e.into_inner());
            channel.close();
            channel.kill();
            return Err(error);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads srun's `stream`: a line labelled `T: ` goes to task T's tail (without the label),
/// srun's own lines to every tail.
fn demux(stream: impl Read + Send + 'static, tasks: Vec<Arc<Mutex<Tail>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            let push = |t: &Arc<Mutex<Tail>>, l: String| {
                t.lock().unwrap_or_else(|e| e.into_inner()).push(l)
            };
            match task_of(&line).filter(|(t, _)| *t < tasks.len()) {
                Some((t, rest)) => push(&tasks[t], rest.to_owned()),
                None => tasks.iter().for_each(|t| push(t, line.clone())),
            }
        }
    })
}

/// `(T, rest)` of a line srun labelled `T: rest` (the number right-aligned).
fn task_of(line: &str) -> Option<(usize, &str)> {
    let (label, rest) = line.split_once(": ")?;
    Some((label.trim_start().parse().ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(scheme: &str, node: &str) -> Arc<dyn Engine> {
        let spec = crate::remote::HostSpec {
            name: node.into(),
            scheme: scheme.into(),
            user: None,
            address: node.into(),
            port: 0,
            identity_file: None,
            workdir: "/tmp/w".into(),
            known_hosts_file: None,
            node: (scheme == SCHEME).then(|| node.to_string()),
        };
        match scheme {
            SCHEME => Arc::new(Slurm::new(spec)),
            _ => Arc::new(crate::remote::Local::new(spec)),
        }
    }

    #[test]
    fn only_ranks_on_distinct_slurm_nodes_are_one_step() {
        let nodes =
            |hosts: &[Arc<dyn Engine>]| step_nodes(&hosts.iter().map(|h| &**h).collect::<Vec<_>>());
        let (a, b) = (host(SCHEME, "n1"), host(SCHEME, "n2"));
        assert_eq!(
            nodes(&[b.clone(), a.clone()]),
            Some(vec!["n2".into(), "n1".into()])
        );
        // One rank, a node twice, a host of another engine: each starts on its own.
        assert_eq!(nodes(std::slice::from_ref(&a)), None);
        assert_eq!(nodes(&[a.clone(), host(SCHEME, "n1")]), None);
        assert_eq!(nodes(&[a, host("local", "n3")]), None);
    }

    #[test]
    fn tasks_follow_the_allocation_s_node_order() {
        let allocation: Vec<String> = ["n1", "n2", "n3"].map(String::from).to_vec();
        let nodes = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            task_order(&nodes(&["n1", "n3"]), &allocation).unwrap(),
            [0, 1]
        );
        // Rank 0 on n3, rank 1 on n2: task 0 lands on n2 (rank 1), task 1 on n3 (rank 0).
        assert_eq!(
            task_order(&nodes(&["n3", "n2"]), &allocation).unwrap(),
            [1, 0]
        );
        let e = task_order(&nodes(&["n1", "n9"]), &allocation)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"n9\" is not in the allocation"), "{e}");
    }

    #[test]
    fn labelled_lines_go_to_their_task() {
        assert_eq!(task_of("0: kvd: rank 0"), Some((0, "kvd: rank 0")));
        assert_eq!(task_of(" 3: x: y"), Some((3, "x: y")));
        assert_eq!(task_of("srun: error: h2: task 0: Exited"), None);
        assert_eq!(task_of("no label"), None);
    }

    /// The step's command, run by a local sh standing in for srun's tasks: each task runs its
    /// own line, and a task on another node than its line's says so and exits.
    #[test]
    fn each_task_runs_its_own_line_on_its_own_node() {
        let lines = vec![
            task_line("n1", "echo zero"),
            task_line("n2", "echo one \"$SLURM_PROCID\""),
        ];
        let cmd = step_command("7", &["n1", "n2"], &lines, true);
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for want in [
            "--jobid=7",
            "--nodelist=n1,n2",
            "--nodes=2",
            "--ntasks=2",
            "--input=all",
            "--label",
            "--cpu-bind=none",
        ] {
            assert!(args.iter().any(|a| a == want), "{want}: {args:?}");
        }
        let at = args.iter().position(|a| a == "sh").unwrap();
        let task = |procid: &str, node: &str| {
            let out = Command::new("sh")
                .args(&args[at + 1..])
                .env("SLURM_PROCID", procid)
                .env("SLURMD_NODENAME", node)
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        };
        assert_eq!(task("0", "n1"), (Some(0), "zero\n".into()));
        assert_eq!(task("1", "n2"), (Some(0), "one 1\n".into()));
        let (code, out) = task("1", "n1");
        assert_eq!(code, Some(WRONG_NODE));
        assert_eq!(
            out,
            "Slurm started task 1 on node n1, not on n2\nstairbench-exit 98\n"
        );
    }
}
