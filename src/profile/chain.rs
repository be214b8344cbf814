//! Chain graphs: off-CPU time by blocked stack, each topped by the stack of the thread that
//! woke it (the Tomcat/rxNetty study's "chain graphs", Gregg's offwaketime as perf events).
//!
//! The recording holds every `sched:sched_switch` (sampled in the thread leaving the CPU:
//! the stack it blocks in) and every `sched:sched_waking` (sampled in the waker: its stack;
//! `sched_wakeup` can fire on the wakee's CPU, in another thread's context) of the machine,
//! because a server is woken by threads outside it (its client's send over loopback). A
//! server thread's off-CPU interval runs from its switch-out to its next switch-in; its waker
//! is the first waking of it in between. Each interval becomes one folded stack weighted by
//! its length in µs: the blocked thread (merged name), its stack root to leaf, `--`, the
//! waker's stack leaf to root, the waker's thread (merged name) on top. A thread switched out
//! runnable (preempted) has no waker: `[preempted]` tops it; a waker outside the recording
//! (perf's buffer lost it) reads `[waker not recorded]`.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::transform::{frames, merge_thread_name};
use super::Folded;

/// The frame between the blocked stack and the waker's.
pub const SEPARATOR: &str = "--";

/// The perf script fields a chain needs (the tracepoint payload names the threads).
pub const CHAIN_FIELDS: &str = "comm,pid,tid,cpu,time,event,trace,ip,sym,dso";

/// What reading a recording of switches and wakings found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ChainScan {
    /// `sched_switch` events read (every thread of the machine).
    pub switches: u64,
    /// `sched_waking` (or `sched_wakeup`) events read.
    pub wakings: u64,
    /// Off-CPU intervals of the recorded threads, ended by a switch-in.
    pub intervals: u64,
    /// Of those, intervals whose waker was recorded.
    pub woken: u64,
    /// Off-CPU time of the intervals, µs.
    pub blocked_us: u64,
    /// Sample headers that could not be read.
    pub garbled: u64,
    /// Seconds between the first and the last event.
    pub span_s: f64,
}

/// One event of the recording.
struct Sample {
    comm: String,
    pid: i32,
    tid: i32,
    time_s: f64,
    event: String,
    trace: String,
    /// Frames, leaf first, kernel frames marked `_[k]`.
    stack: Vec<String>,
}

/// A server thread off CPU since `since_s`.
struct Off {
    since_s: f64,
    thread: String,
    stack: Vec<String>,
    preempted: bool,
    waker: Option<(String, Vec<String>)>,
}

/// Folds a `perf script -F CHAIN_FIELDS` text into chain stacks (weight µs) of the threads
/// of processes `pids`.
pub fn fold_chains(script: &str, pids: &HashSet<i32>) -> (Folded, ChainScan) {
    let mut scan = ChainScan::default();
    let mut off: HashMap<i32, Off> = HashMap::new();
    let mut sums: HashMap<String, u64> = HashMap::new();
    let (mut first, mut last) = (f64::INFINITY, f64::NEG_INFINITY);
    for block in script.split("\n\n") {
        let Some(sample) = parse_sample(block, &mut scan) else {
            continue;
        };
        first = first.min(sample.time_s);
        last = last.max(sample.time_s);
        if sample.event.ends_with("sched_switch") {
            scan.switches += 1;
            on_switch(&sample, pids, &mut off, &mut sums, &mut scan);
        } else if sample.event.ends_with("sched_waking") || sample.event.ends_with("sched_wakeup") {
            scan.wakings += 1;
            if let Some(wakee) = field(&sample.trace, "pid").and_then(|p| p.parse().ok()) {
                if let Some(o) = off.get_mut(&wakee) {
                    o.waker.get_or_insert_with(|| waker_of(&sample));
                }
            }
        }
    }
    scan.span_s = if last > first { last - first } else { 0.0 };
    (Folded::from_pairs(sums), scan)
}

/// The waker's thread (merged name) and stack. A timer or an interrupt wakes from inside
/// whatever task it interrupted: that task is not the waker, so its frames are cut off below
/// the interrupt's entry and the thread reads `[timer]` or `[interrupt]`.
fn waker_of(s: &Sample) -> (String, Vec<String>) {
    let entry = s
        .stack
        .iter()
        .position(|f| f.starts_with("asm_sysvec_") || f.starts_with("asm_common_interrupt"));
    let timer = s.stack.iter().any(|f| f.starts_with("hrtimer_wakeup"));
    let stack = match entry {
        Some(i) => s.stack[..=i].to_vec(),
        None => s.stack.clone(),
    };
    let thread = if timer {
        "[timer]".to_string()
    } else if entry.is_some() {
        "[interrupt]".to_string()
    } else {
        merge_thread_name(&s.comm).to_string()
    };
    (thread, stack)
}

fn on_switch(
    s: &Sample,
    pids: &HashSet<i32>,
    off: &mut HashMap<i32, Off>,
    sums: &mut HashMap<String, u64>,
    scan: &mut ChainScan,
) {
    // the thread coming back ends its interval
    if let Some(next) = field(&s.trace, "next_pid").and_then(|p| p.parse::<i32>().ok()) {
        if let Some(o) = off.remove(&next) {
            let us = ((s.time_s - o.since_s) * 1e6).round().max(0.0) as u64;
            scan.intervals += 1;
            scan.blocked_us += us;
            scan.woken += u64::from(o.waker.is_some());
            *sums.entry(chain_stack(&o)).or_insert(0) += us;
        }
    }
    // the sampled thread is the one leaving (perf samples in the current task)
    if pids.contains(&s.pid) && s.tid != 0 {
        let state = field(&s.trace, "prev_state").unwrap_or("");
        off.insert(
            s.tid,
            Off {
                since_s: s.time_s,
                thread: merge_thread_name(&s.comm).to_string(),
                stack: s.stack.clone(),
                preempted: state.starts_with('R'),
                waker: None,
            },
        );
    }
}

/// `thread;root..leaf;--;waker leaf..root;waker thread`.
fn chain_stack(o: &Off) -> String {
    let mut parts: Vec<&str> = vec![&o.thread];
    parts.extend(o.stack.iter().rev().map(String::as_str));
    parts.push(SEPARATOR);
    match &o.waker {
        Some((thread, stack)) => {
            parts.extend(stack.iter().map(String::as_str));
            parts.push(thread);
        }
        None if o.preempted => parts.push("[preempted]"),
        None => parts.push("[waker not recorded]"),
    }
    parts.join(";")
}

/// `key=value` of a tracepoint payload (values are single words in sched's payloads).
fn field<'a>(trace: &'a str, key: &str) -> Option<&'a str> {
    trace.split_whitespace().find_map(|w| {
        let (k, v) = w.split_once('=')?;
        (k == key).then_some(v)
    })
}

/// `comm pid/tid [cpu] time: event: payload` then one frame per line.
fn parse_sample(block: &str, scan: &mut ChainScan) -> Option<Sample> {
    let mut lines = block.lines().skip_while(|l| l.trim().is_empty());
    let header = lines.next()?;
    let parsed = parse_header(header);
    if parsed.is_none() {
        scan.garbled += 1;
    }
    let (comm, pid, tid, time_s, event, trace) = parsed?;
    let stack = lines.filter_map(parse_frame).collect();
    Some(Sample {
        comm,
        pid,
        tid,
        time_s,
        event,
        trace,
        stack,
    })
}

type Header = (String, i32, i32, f64, String, String);

fn parse_header(line: &str) -> Option<Header> {
    // the comm may hold spaces: find " PID/TID [CPU] " from the right of it
    let open = line.find(" [")?;
    let (before, after) = line.split_at(open);
    let (comm, ids) = before.trim_end().rsplit_once(char::is_whitespace)?;
    let (pid, tid) = ids.split_once('/')?;
    let after = after.trim_start().strip_prefix('[')?;
    let (_cpu, rest) = after.split_once(']')?;
    let (time, rest) = rest.trim_start().split_once(": ")?;
    let (event, trace) = rest
        .split_once(": ")
        .unwrap_or((rest.trim_end_matches(':'), ""));
    Some((
        comm.trim().to_string(),
        pid.parse().ok()?,
        tid.parse().ok()?,
        time.trim().parse().ok()?,
        event.trim().to_string(),
        trace.trim().to_string(),
    ))
}

/// `ADDR SYMBOL+OFF (DSO)` → the symbol (else `[dso name]`), marked `_[k]` in the kernel
/// and `_[j]` in a perf map.
fn parse_frame(line: &str) -> Option<String> {
    let line = line.trim();
    let (_addr, rest) = line.split_once(char::is_whitespace)?;
    let (sym, dso) = match rest.rfind(" (") {
        Some(i) if rest.ends_with(')') => (&rest[..i], &rest[i + 2..rest.len() - 1]),
        _ => (rest, ""),
    };
    let sym = match sym.rfind("+0x") {
        Some(i) => &sym[..i],
        None => sym,
    };
    let mut name = if sym.is_empty() || sym == "[unknown]" {
        let base = dso.rsplit('/').next().unwrap_or(dso);
        format!("[{}]", if base.is_empty() { "unknown" } else { base })
    } else {
        sym.trim().to_string()
    };
    let kernel = dso.starts_with('[')
        && dso.ends_with(']')
        && !matches!(
            dso,
            "[unknown]" | "[vdso]" | "[vsyscall]" | "[heap]" | "[stack]" | "[anon]"
        );
    if kernel {
        name.push_str("_[k]");
    } else if dso.starts_with("/tmp/perf-") && dso.ends_with(".map") {
        name.push_str("_[j]");
    }
    // a `;` would cut the folded stack
    Some(name.replace(';', ":"))
}

pub use crate::record::profiles::ChainPath;

/// The `rows` largest paths of the chain stacks.
pub fn largest_paths(chains: &Folded, rows: usize) -> Vec<ChainPath> {
    let total = chains.total().max(1) as f64;
    let mut by_path: BTreeMap<(String, String, String, String), u64> = BTreeMap::new();
    for (stack, us) in chains.stacks() {
        let all: Vec<&str> = frames(stack).collect();
        let Some(sep) = all.iter().position(|f| *f == SEPARATOR) else {
            continue;
        };
        let blocked = &all[1..sep];
        let waker = &all[sep + 1..];
        let waker_thread = waker.last().copied().unwrap_or("");
        let waker_frames = &waker[..waker.len().saturating_sub(1)];
        let key = (
            all[0].to_string(),
            deepest_user(blocked.iter().rev().copied()),
            waker_thread.to_string(),
            deepest_user(waker_frames.iter().copied()),
        );
        *by_path.entry(key).or_insert(0) += us;
    }
    let mut paths: Vec<ChainPath> = by_path
        .into_iter()
        .map(|((bt, bi, wt, wf), us)| ChainPath {
            blocked_thread: bt,
            blocked_in: bi,
            waker_thread: wt,
            woken_from: wf,
            blocked_ms: us as f64 / 1e3,
            share_pct: 100.0 * us as f64 / total,
        })
        .collect();
    paths.sort_by(|a, b| b.blocked_ms.total_cmp(&a.blocked_ms));
    paths.truncate(rows);
    paths
}

/// The deepest named Java frame of `leaf_first` (frames from the leaf outwards), else its
/// first user-space frame, else the leaf itself (all kernel frames).
fn deepest_user<'a>(leaf_first: impl Iterator<Item = &'a str> + Clone) -> String {
    let leaf = leaf_first.clone().next().unwrap_or("");
    let java = leaf_first.clone().find(|f| {
        f.ends_with("_[j]") && !f.starts_with("Interpreter") && !f.starts_with("StubRoutines")
    });
    let user = java
        .or_else(|| leaf_first.clone().find(|f| !f.ends_with("_[k]")))
        .unwrap_or(leaf);
    strip_marks(user).to_string()
}

fn strip_marks(frame: &str) -> &str {
    frame
        .strip_suffix("_[k]")
        .or_else(|| frame.strip_suffix("_[j]"))
        .unwrap_or(frame)
}

/// The paths as a markdown table.
pub fn paths_markdown(paths: &[ChainPath]) -> String {
    let mut out = String::from(
        "| blocked thread | blocked in | woken by | waker in | blocked ms | share % |\n| --- | --- | --- | --- | ---: | ---: |\n",
    );
    for p in paths {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.1} | {:.1} |\n",
            cell(&p.blocked_thread),
            cell(&p.blocked_in),
            cell(&p.waker_thread),
            cell(&p.woken_from),
            p.blocked_ms,
            p.share_pct
        ));
    }
    out
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
tomcat-exec-3 100/103 [000] 10.000000: sched:sched_switch: prev_comm=tomcat-exec-3 prev_pid=103 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
\tffffffff8100 __schedule+0x1 ([kernel.kallsyms])
\tffffffff8101 futex_wait+0x2 ([kernel.kallsyms])
\t7f0001 void jdk.internal.misc.Unsafe.park(boolean, long) (/tmp/perf-100.map)
\t7f0002 start_thread+0x3 (/usr/lib/libc.so.6)

http-nio-Poller 100/101 [001] 10.000400: sched:sched_waking: comm=tomcat-exec-3 pid=103 prio=120 target_cpu=000
\tffffffff8200 try_to_wake_up+0x1 ([kernel.kallsyms])
\tffffffff8201 futex_wake+0x1 ([kernel.kallsyms])
\t7f0003 boolean java.util.concurrent.LinkedBlockingQueue.offer(java.lang.Object) (/tmp/perf-100.map)

swapper 0/0 [000] 10.000500: sched:sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=tomcat-exec-3 next_pid=103 next_prio=120
\tffffffff8100 __schedule+0x1 ([kernel.kallsyms])

other 200/200 [001] 10.000600: sched:sched_switch: prev_comm=other prev_pid=200 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
\tffffffff8100 __schedule+0x1 ([kernel.kallsyms])

VM Periodic Tas 100/104 [001] 10.001000: sched:sched_switch: prev_comm=VM Periodic Tas prev_pid=104 prev_prio=120 prev_state=R+ ==> next_comm=other next_pid=200 next_prio=120
\tffffffff8100 __schedule+0x1 ([kernel.kallsyms])

garbled line without a header

VM Thread 100/105 [001] 10.001000: sched:sched_switch: prev_comm=VM Thread prev_pid=105 prev_prio=120 prev_state=S ==> next_comm=rustc next_pid=300 next_prio=120
\tffffffff8100 __schedule+0x1 ([kernel.kallsyms])

rustc 300/300 [001] 10.001500: sched:sched_waking: comm=VM Thread pid=105 prio=120 target_cpu=001
\tffffffff8200 try_to_wake_up+0x1 ([kernel.kallsyms])
\tffffffff8202 hrtimer_wakeup+0x1 ([kernel.kallsyms])
\tffffffff8203 asm_sysvec_apic_timer_interrupt+0x1 ([kernel.kallsyms])
\t5500 rustc_main (/usr/bin/rustc)

other 200/200 [001] 10.003000: sched:sched_switch: prev_comm=other prev_pid=200 prev_prio=120 prev_state=S ==> next_comm=VM Periodic Tas next_pid=104 next_prio=120
\tffffffff8100 __schedule+0x1 ([kernel.kallsyms])

rustc 300/300 [001] 10.004000: sched:sched_switch: prev_comm=rustc prev_pid=300 prev_prio=120 prev_state=R ==> next_comm=VM Thread next_pid=105 next_prio=120
\tffffffff8100 __schedule+0x1 ([kernel.kallsyms])
";

    #[test]
    fn blocked_time_is_topped_by_the_waker_and_its_thread() {
        let pids: HashSet<i32> = [100].into();
        let (chains, scan) = fold_chains(SCRIPT, &pids);
        assert_eq!(scan.switches, 7);
        assert_eq!(scan.wakings, 2);
        assert_eq!(scan.intervals, 3);
        assert_eq!(scan.woken, 2);
        assert_eq!(scan.blocked_us, 500 + 2000 + 3000);
        // a timer interrupting rustc woke the VM Thread: rustc's frames are not the waker's
        assert!(
            chains.to_text().contains("VM Thread;__schedule_[k];--;try_to_wake_up_[k];hrtimer_wakeup_[k];asm_sysvec_apic_timer_interrupt_[k];[timer] 3000\n"),
            "{}",
            chains.to_text()
        );
        assert_eq!(scan.garbled, 1);
        let text = chains.to_text();
        assert!(
            text.contains("tomcat-exec;start_thread;void jdk.internal.misc.Unsafe.park(boolean, long)_[j];futex_wait_[k];__schedule_[k];--;try_to_wake_up_[k];futex_wake_[k];boolean java.util.concurrent.LinkedBlockingQueue.offer(java.lang.Object)_[j];http-nio-Poller 500\n"),
            "{text}"
        );
        assert!(
            text.contains("VM Periodic Tas;__schedule_[k];--;[preempted] 2000"),
            "{text}"
        );
        let paths = largest_paths(&chains, 10);
        assert_eq!(paths.len(), 3);
        assert_eq!(paths[0].waker_thread, "[timer]");
        assert_eq!(paths[1].waker_thread, "[preempted]");
        let p = &paths[2];
        assert_eq!(p.blocked_thread, "tomcat-exec");
        assert_eq!(
            p.blocked_in,
            "void jdk.internal.misc.Unsafe.park(boolean, long)"
        );
        assert_eq!(p.waker_thread, "http-nio-Poller");
        assert_eq!(
            p.woken_from,
            "boolean java.util.concurrent.LinkedBlockingQueue.offer(java.lang.Object)"
        );
        assert!((p.share_pct - 500.0 / 55.0).abs() < 1e-9);
        assert!(paths_markdown(&paths).contains("| tomcat-exec |"));
    }
}
