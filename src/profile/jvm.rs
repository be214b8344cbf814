//! Java targets: their JIT-compiled frames named, and the share of Java samples left unnamed.
//!
//! perf finds no symbol for code the JVM compiled at run time: each such frame reads
//! `[perf-PID.map]` unless the JVM has written `/tmp/perf-PID.map` (address, size, name per
//! line) by the time `perf script` resolves the recording. OpenJDK 17 writes it on demand,
//! `jcmd PID Compiler.perfmap`, so a recorded JVM gets its map right after the recording
//! stops (code compiled during the recording is then in it), before `perf script` runs; the
//! map is copied beside the profile's perf script so the names can be checked later. The map
//! lists only the code alive when it is written: a JVM busy recompiling (beside other work,
//! 48% of its Java samples stayed unnamed) frees code the recording sampled, so a first map
//! is also taken while the recording starts, and its entries that no later one overlaps are
//! kept in the map `perf script` reads. Where
//! jcmd is missing or refused the JVM can write it itself when it exits
//! (`-XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit`), which is the advice given.
//!
//! perf walks a JIT frame's callers only through frame pointers, which JIT-compiled code
//! keeps only with `-XX:+PreserveFramePointer`: without it a stack stops at the first Java
//! frame, so a JVM running without it is advised to use it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::transform::frames;
use super::Folded;
pub use crate::record::profiles::{JavaShare, JvmMap};

/// inferno's mark on a frame whose code is in a perf map (folded with `annotate_jit`).
pub const JIT_MARK: &str = "_[j]";

/// How long one `jcmd` may take (it attaches to the JVM; slow on a busy machine).
const JCMD_TIMEOUT: Duration = Duration::from_secs(20);

/// True when `pid` runs a HotSpot JVM (libjvm.so is mapped).
pub fn is_jvm(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.lines().any(|l| l.ends_with("/libjvm.so")))
}

/// The perf maps of the JVMs among some pids as a recording starts: (pid, map text).
pub type FirstMaps = Vec<(i32, String)>;

/// Asks each JVM among `pids` for its perf map, in a thread, while the recording starts:
/// join it after the recording and hand the maps to [`write_perf_maps`].
pub fn first_maps(pids: &[i32]) -> std::thread::JoinHandle<FirstMaps> {
    let jvms: Vec<i32> = pids.iter().copied().filter(|&p| is_jvm(p)).collect();
    std::thread::spawn(move || {
        jvms.into_iter()
            .filter_map(|pid| {
                jcmd(pid, "Compiler.perfmap").ok()?;
                Some((
                    pid,
                    std::fs::read_to_string(format!("/tmp/perf-{pid}.map")).ok()?,
                ))
            })
            .collect()
    })
}

/// For each JVM among `pids`: asks it to write its perf map, adds the entries of its map in
/// `first` that no entry of the new one overlaps, writes that back for `perf script`, copies
/// it into `out_dir` (`perf-PID.map`) and checks for frame pointers. Call after recording,
/// before `perf script`.
pub fn write_perf_maps(pids: &[i32], first: &FirstMaps, out_dir: &Path) -> Vec<JvmMap> {
    pids.iter()
        .filter(|&&pid| is_jvm(pid))
        .map(|&pid| {
            let earlier = first
                .iter()
                .find(|(p, _)| *p == pid)
                .map(|(_, t)| t.as_str());
            write_perf_map(pid, earlier, out_dir)
        })
        .collect()
}

/// The lines of the map `last`, then those of `earlier` whose address range overlaps none
/// of `last`'s: code freed since `earlier` was written keeps its name, and an address the
/// JVM reused is named as it is now.
fn merge_maps(earlier: &str, last: &str) -> String {
    let range = |line: &str| {
        let mut f = line.split_whitespace();
        let start = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
        let size = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
        Some((start, start + size))
    };
    let mut taken: Vec<(u64, u64)> = last.lines().filter_map(range).collect();
    taken.sort_unstable();
    let overlaps = |(a, b): (u64, u64)| {
        let i = taken.partition_point(|r| r.1 <= a);
        taken.get(i).is_some_and(|r| r.0 < b)
    };
    let mut out = String::from(last);
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    for line in earlier.lines() {
        if range(line).is_some_and(|r| !overlaps(r)) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn write_perf_map(pid: i32, earlier: Option<&str>, out_dir: &Path) -> JvmMap {
    let mut advice = Vec::new();
    let tmp_map = format!("/tmp/perf-{pid}.map");
    let (map_file, symbols) = match jcmd(pid, "Compiler.perfmap") {
        Ok(_) => match std::fs::read_to_string(&tmp_map) {
            Ok(last) => {
                let text = earlier.map_or(last.clone(), |e| merge_maps(e, &last));
                if text != last {
                    if let Err(e) = std::fs::write(&tmp_map, &text) {
                        advice.push(format!("{tmp_map} could not be rewritten: {e}"));
                    }
                }
                let name = format!("perf-{pid}.map");
                match std::fs::write(out_dir.join(&name), &text) {
                    Ok(()) => (Some(name), text.lines().count()),
                    Err(e) => {
                        advice.push(format!("{tmp_map} could not be copied: {e}"));
                        (None, text.lines().count())
                    }
                }
            }
            Err(e) => {
                advice.push(format!("jcmd ran but {tmp_map} cannot be read ({e})"));
                (None, 0)
            }
        },
        Err(why) => {
            advice.push(format!(
                "JIT frames stay unnamed ([perf-{pid}.map]): `jcmd {pid} Compiler.perfmap` {why}; \
                 start the JVM with -XX:+UnlockDiagnosticVMOptions -XX:+DumpPerfMapAtExit \
                 (it writes {tmp_map} when it exits) and fold the perf script after that"
            ));
            (None, 0)
        }
    };
    let preserve_frame_pointer = preserves_frame_pointer(pid);
    if preserve_frame_pointer == Some(false) {
        advice.push(format!(
            "JVM {pid} runs without -XX:+PreserveFramePointer: its stacks stop at the first \
             JIT-compiled frame; add the flag (JAVA_OPTS or JAVA_TOOL_OPTIONS) for whole stacks"
        ));
    }
    JvmMap {
        pid,
        map_file,
        symbols,
        preserve_frame_pointer,
        advice,
    }
}

/// Whether the JVM keeps frame pointers: its flags as jcmd reports them, else its command
/// line and `JAVA_TOOL_OPTIONS` / `JDK_JAVA_OPTIONS`; None when neither can be read.
fn preserves_frame_pointer(pid: i32) -> Option<bool> {
    if let Ok(flags) = jcmd(pid, "VM.flags") {
        return Some(last_flag(&flags));
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let env_opts: Vec<u8> = environ
        .split(|b| *b == 0)
        .filter(|v| v.starts_with(b"JAVA_TOOL_OPTIONS=") || v.starts_with(b"JDK_JAVA_OPTIONS="))
        .flat_map(|v| v.iter().copied().chain([b' ']))
        .collect();
    // environment options come first, the command line overrides them
    let all = [env_opts, cmdline].concat();
    Some(last_flag(&String::from_utf8_lossy(&all)))
}

/// The last `-XX:±PreserveFramePointer` in `text` wins; absent means off (HotSpot's default).
fn last_flag(text: &str) -> bool {
    let on = text.rfind("-XX:+PreserveFramePointer");
    let off = text.rfind("-XX:-PreserveFramePointer");
    match (on, off) {
        (Some(a), Some(b)) => a > b,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Why `jcmd PID COMMAND` gave nothing (said after the command in the advice).
#[derive(Debug, thiserror::Error)]
enum JcmdError {
    /// No jcmd on the PATH.
    #[error("could not run: jcmd is not installed (Debian: openjdk-17-jdk-headless)")]
    NotInstalled,
    /// It could not be started or read.
    #[error("could not start: {0}")]
    Start(std::io::Error),
    /// It ran past [`JCMD_TIMEOUT`].
    #[error("did not answer within {} s", JCMD_TIMEOUT.as_secs())]
    Timeout,
    /// Its output could not be collected.
    #[error("{0}")]
    Output(std::io::Error),
    /// The JVM refused the command (its first two lines).
    #[error("was refused ({0})")]
    Refused(String),
}

/// Runs `jcmd PID COMMAND` within [`JCMD_TIMEOUT`]: its output, or why it failed.
fn jcmd(pid: i32, command: &str) -> Result<String, JcmdError> {
    let mut child = Command::new("jcmd")
        .args([&pid.to_string(), command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => JcmdError::NotInstalled,
            _ => JcmdError::Start(e),
        })?;
    let deadline = Instant::now() + JCMD_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(JcmdError::Timeout);
            }
        }
    }
    let out = child.wait_with_output().map_err(JcmdError::Output)?;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    // jcmd exits 0 even when the JVM refuses a command; the refusal is in its output
    let refused = stdout.contains("Exception") || stdout.contains("Unknown diagnostic command");
    if out.status.success() && !refused {
        return Ok(stdout);
    }
    let said = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let said = said
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.ends_with(':'))
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    Err(JcmdError::Refused(said))
}

/// The Java share of stacks folded with `annotate_jit`; None when no stack runs Java code.
pub fn java_share(folded: &Folded) -> Option<JavaShare> {
    let total = folded.total();
    let (mut java, mut unnamed) = (0u64, 0u64);
    for (stack, weight) in folded.stacks() {
        let mut runs_java = false;
        let mut has_unnamed = false;
        for f in frames(stack).skip(1) {
            let jit = f.ends_with(JIT_MARK);
            runs_java |= jit || is_interpreter(f);
            has_unnamed |= jit && is_unnamed_jit(f);
        }
        if runs_java {
            java += weight;
            if has_unnamed {
                unnamed += weight;
            }
        }
    }
    (java > 0 && total > 0).then(|| JavaShare {
        java_pct: 100.0 * java as f64 / total as f64,
        unnamed_jit_pct: 100.0 * unnamed as f64 / java as f64,
    })
}

/// HotSpot's interpreter (a perf-map stub once named; `Interpreter` in the map).
fn is_interpreter(frame: &str) -> bool {
    frame.starts_with("Interpreter")
}

/// `[perf-123.map]_[j]` or `[unknown]_[j]`: a JIT frame without a symbol.
fn is_unnamed_jit(frame: &str) -> bool {
    let name = frame.strip_suffix(JIT_MARK).unwrap_or(frame);
    name == "[unknown]" || (name.starts_with("[perf-") && name.ends_with(".map]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_jit_share_counts_java_stacks_only() {
        let f = Folded::from_pairs([
            (
                "exec;start_thread;[perf-9.map]_[j];read_[k]".to_string(),
                30,
            ),
            (
                "exec;start_thread;void Foo.bar()_[j];Interpreter_[j]".to_string(),
                60,
            ),
            ("exec;start_thread;Interpreter_[j]".to_string(), 10),
            ("gc;start_thread;G1::work".to_string(), 100),
        ]);
        let s = java_share(&f).unwrap();
        assert_eq!(s.java_pct, 50.0);
        assert_eq!(s.unnamed_jit_pct, 30.0);
        let native = Folded::from_pairs([("gc;start_thread;G1::work".to_string(), 100)]);
        assert_eq!(java_share(&native), None);
    }

    #[test]
    fn a_first_maps_entries_stay_where_no_later_code_lies() {
        let first = "7f00 20 LA::old\n7f40 10 LA::freed\n7f80 10 LA::kept\n";
        let last = "7f00 20 LB::recompiled\n7f48 4 LB::reused\n";
        let merged = merge_maps(first, last);
        assert_eq!(
            merged,
            "7f00 20 LB::recompiled\n7f48 4 LB::reused\n7f80 10 LA::kept\n"
        );
        assert_eq!(merge_maps("", last), last);
    }

    #[test]
    fn the_last_frame_pointer_flag_wins() {
        assert!(!last_flag("java -Xmx1g Main"));
        assert!(last_flag("-XX:+PreserveFramePointer -Xmx1g"));
        assert!(!last_flag(
            "-XX:+PreserveFramePointer -XX:-PreserveFramePointer"
        ));
        assert!(last_flag(
            "-XX:-PreserveFramePointer -XX:+PreserveFramePointer"
        ));
    }

    #[test]
    fn a_process_that_is_not_a_jvm_gets_no_map() {
        let me = std::process::id() as i32;
        assert!(!is_jvm(me));
        let dir = tempfile::tempdir().unwrap();
        assert!(write_perf_maps(&[me], &Vec::new(), dir.path()).is_empty());
    }
}
