//! Named groups of functions ("synchronisation: sem_wait|sem_post|futex") and their shares,
//! as the shared-memory hash-table study splits its profile into communication, dispatch and hash table.
//!
//! Each category gets two figures: its inclusive share (samples with any frame matching), and
//! its attributed share, where each sample goes to the category of the matching frame nearest
//! the leaf (the first category listed wins on one frame), so attributed shares and `other`
//! add up to 100%.

use regex::Regex;
use serde::Serialize;

use super::transform::frames;
use super::{Folded, ProfileError};

/// One category: a name and the regex its functions match.
#[derive(Debug, Clone)]
pub struct Category {
    /// The name shown in the table.
    pub name: String,
    /// Matched against each frame (not the thread frame).
    pub pattern: Regex,
}

/// One category's share of the profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CategoryShare {
    /// The category (`other` for samples no category matched).
    pub name: String,
    /// % of the total weight in samples with any frame matching.
    pub inclusive_pct: f64,
    /// % of the total weight attributed to this category (nearest the leaf wins).
    pub attributed_pct: f64,
}

/// Reads `NAME: REGEX` lines; empty lines and `#` comments are skipped.
pub fn parse(text: &str) -> Result<Vec<Category>, ProfileError> {
    let mut categories = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, pattern) = line
            .split_once(':')
            .ok_or_else(|| ProfileError::BadOption {
                what: format!(
                    "categories line {}: `{line}` has no `:`: write `NAME: REGEX`",
                    index + 1
                ),
            })?;
        let pattern = Regex::new(pattern.trim()).map_err(|e| ProfileError::BadOption {
            what: format!("categories line {}: bad regex: {e}", index + 1),
        })?;
        categories.push(Category {
            name: name.trim().to_string(),
            pattern,
        });
    }
    Ok(categories)
}

/// The share of each category, then `other`.
pub fn shares(folded: &Folded, categories: &[Category]) -> Vec<CategoryShare> {
    let mut inclusive = vec![0u64; categories.len()];
    let mut attributed = vec![0u64; categories.len() + 1];
    for (stack, count) in folded.stacks() {
        let names: Vec<&str> = frames(stack).skip(1).collect();
        let matching: Vec<bool> = categories
            .iter()
            .map(|c| names.iter().any(|f| c.pattern.is_match(f)))
            .collect();
        for (i, m) in matching.iter().enumerate() {
            inclusive[i] += count * u64::from(*m);
        }
        let owner = names
            .iter()
            .rev()
            .find_map(|f| categories.iter().position(|c| c.pattern.is_match(f)))
            .unwrap_or(categories.len());
        attributed[owner] += count;
    }
    let total = folded.total().max(1) as f64;
    let names = categories.iter().map(|c| c.name.as_str()).chain(["other"]);
    names
        .enumerate()
        .map(|(i, name)| CategoryShare {
            name: name.to_string(),
            inclusive_pct: 100.0 * inclusive.get(i).copied().unwrap_or(attributed[i]) as f64
                / total,
            attributed_pct: 100.0 * attributed[i] as f64 / total,
        })
        .collect()
}

/// The built-in lock, futex and scheduler frames (issue 13's contention evidence): glibc's
/// and the kernel's futex and mutex paths, the JVM's parking and monitors, and the kernel's
/// scheduler entry points (a thread switching out or waking another one).
pub const SYNC_PATTERN: &str = concat!(
    r"futex|__lll_lock|__lll_unlock|pthread_mutex|pthread_cond|pthread_rwlock|pthread_spin",
    r"|sem_wait|sem_post|Parker::park|Unsafe_Park|Unsafe_Unpark|ObjectMonitor|ObjectSynchronizer",
    r"|^(schedule|__schedule|schedule_timeout|schedule_hrtimeout_range|schedule_hrtimeout_range_clock",
    r"|do_sched_yield|__x64_sys_sched_yield|finish_task_switch(\.isra\.0)?|try_to_wake_up",
    r"|pick_next_task_fair|native_queued_spin_lock_slowpath|_raw_spin_lock)$",
);

/// The built-in category: `sync`, [`SYNC_PATTERN`].
pub fn sync_category() -> Category {
    Category {
        name: "sync".into(),
        pattern: Regex::new(SYNC_PATTERN).expect("the built-in pattern compiles"),
    }
}

/// % of the total weight in samples with a lock, futex or scheduler frame.
pub fn sync_pct(folded: &Folded) -> f64 {
    shares(folded, &[sync_category()])[0].inclusive_pct
}

/// A markdown table of category shares.
pub fn to_markdown(shares: &[CategoryShare]) -> String {
    let mut out =
        String::from("| category | inclusive % | attributed % |\n| --- | ---: | ---: |\n");
    for s in shares {
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} |\n",
            s.name, s.inclusive_pct, s.attributed_pct
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributed_shares_add_up() {
        let cats = parse("# groups\nsync: sem_wait|futex\n\nhash table: ht_\n").unwrap();
        let f = Folded::from_pairs([
            ("t;serve;ht_get;futex".to_string(), 2),
            ("t;serve;ht_get".to_string(), 3),
            ("t;serve;sem_wait".to_string(), 4),
            ("t;idle".to_string(), 1),
        ]);
        let s = shares(&f, &cats);
        assert_eq!(s[0].name, "sync");
        assert_eq!(s[0].inclusive_pct, 60.0);
        assert_eq!(s[0].attributed_pct, 60.0);
        assert_eq!(s[1].inclusive_pct, 50.0);
        assert_eq!(s[1].attributed_pct, 30.0);
        assert_eq!(s[2].name, "other");
        assert_eq!(s[2].attributed_pct, 10.0);
        let sum: f64 = s.iter().map(|x| x.attributed_pct).sum();
        assert!((sum - 100.0).abs() < 1e-9);
        assert!(parse("nocolon").is_err());
        assert!(parse(&format!("sync: {SYNC_PATTERN}")).is_ok());
        assert!(parse("x: (").is_err());
    }

    #[test]
    fn lock_futex_and_scheduler_frames_count_once_per_sample() {
        // Tomcat's busiest stack recorded by examples/tomcat.toml (a pool thread parking), a
        // glibc mutex, a wait in epoll, work, and names that only look like the scheduler's.
        let f = Folded::from_pairs([
            ("tomcat-exec;__futex_abstimed_wait_common;entry_SYSCALL_64_after_hwframe;do_syscall_64;__x64_sys_futex;do_futex;futex_wait;__futex_wait;futex_do_wait;schedule;__schedule;finish_task_switch.isra.0".to_string(), 5),
            ("app;main;__lll_lock_wait".to_string(), 2),
            ("app;main;epoll_wait;schedule_hrtimeout_range;schedule".to_string(), 1),
            ("app;main;parse_request".to_string(), 2),
            ("app;main;scheduler_loop;pick_next_task_fair_wrapper".to_string(), 10),
        ]);
        assert_eq!(sync_pct(&f), 40.0);
        assert_eq!(
            sync_pct(&Folded::from_pairs([("t;work".to_string(), 1)])),
            0.0
        );
    }
}
