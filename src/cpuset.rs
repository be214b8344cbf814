//! CPU lists in the kernel's format ("0-3,8,10-11"), and pinning threads to them.

use std::fmt::Write as _;

use thiserror::Error;

/// A CPU list that could not be read.
#[derive(Debug, Error)]
#[error("bad CPU list {input:?}: {why} (expected a list such as 0-3,8)")]
pub struct CpuListError {
    input: String,
    why: String,
}

/// Parses "0-3,8,10-11" into sorted, distinct CPU numbers.
pub fn parse(input: &str) -> Result<Vec<usize>, CpuListError> {
    let err = |why: &str| CpuListError {
        input: input.to_string(),
        why: why.to_string(),
    };
    let mut cpus = Vec::new();
    for part in input.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(err("empty item"));
        }
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let lo: usize = lo
            .parse()
            .map_err(|_| err(&format!("{lo:?} is not a CPU number")))?;
        let hi: usize = hi
            .parse()
            .map_err(|_| err(&format!("{hi:?} is not a CPU number")))?;
        if hi < lo {
            return Err(err(&format!("range {part} runs backwards")));
        }
        if hi >= 4096 {
            return Err(err(&format!("CPU {hi} is out of range")));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPU numbers as a compact list ("0-3,8"), in the order given, merging runs.
pub fn format(cpus: &[usize]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

/// A CPU list given on the command line (a newtype, so clap parses it as one value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

impl std::str::FromStr for CpuList {
    type Err = CpuListError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse(s).map(CpuList)
    }
}

/// A CPU that threads cannot be pinned to: the machine (or this process's affinity) has
/// no such CPU. Pinning there would silently run unpinned, so it is refused up front.
#[derive(Debug, Error)]
#[error("cannot pin to CPU {cpu}: this machine has CPUs {available}")]
pub struct PinError {
    /// The CPU asked for.
    pub cpu: usize,
    /// The CPUs this process may run on, as a list.
    pub available: String,
}

/// Checks that every CPU of `cpus` is one this process may run on.
pub fn check_available(cpus: &[usize]) -> Result<(), PinError> {
    let allowed = allowed();
    match cpus.iter().find(|c| !allowed.contains(c)) {
        Some(&cpu) => Err(PinError {
            cpu,
            available: format(&allowed),
        }),
        None => Ok(()),
    }
}

/// Pins the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> nix::Result<()> {
    pin_current_thread_to(&[cpu])
}

/// Pins the calling thread to a set of CPUs.
pub fn pin_current_thread_to(cpus: &[usize]) -> nix::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu)?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
}

/// The CPUs this process may run on.
pub fn allowed() -> Vec<usize> {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return (0..num_cpus_online()).collect();
    };
    (0..nix::sched::CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

fn num_cpus_online() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ranges_and_singles() {
        assert_eq!(parse("0-3,8,10-11").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse("5").unwrap(), vec![5]);
        assert_eq!(parse("3,1,1").unwrap(), vec![1, 3]);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse("").is_err());
        assert!(parse("a").is_err());
        assert!(parse("3-1").is_err());
        assert!(parse("1,,2").is_err());
    }

    #[test]
    fn formats_round_trip() {
        for s in ["0-3,8,10-11", "0", "0,2,4", "28-55"] {
            assert_eq!(format(&parse(s).unwrap()), s);
        }
        assert_eq!(format(&[0, 56, 28, 84]), "0,56,28,84");
    }

    #[test]
    fn a_cpu_beyond_the_machine_is_refused_by_name() {
        let mine = allowed();
        assert!(check_available(&mine).is_ok());
        let err = check_available(&[0, 4095]).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "cannot pin to CPU 4095: this machine has CPUs {}",
                format(&mine)
            )
        );
    }
}
