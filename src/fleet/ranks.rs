//! The ranks of a kvd target spread over hosts (`rank_hosts`): rank j is started with
//! `--rank j` and its own region (`NAME-rj`, as `--spawn-peers` names them: hosts that share
//! /dev/shm, such as network namespaces, keep them apart), and a client group on rank j's host
//! loads that rank.

/// The ready line every rank prints once its peers are connected and its region is up.
pub const RANK_READY: &str = r"^kvd: rank \d+ of \d+ serving";

/// The value of option `name` in a builtin's words.
pub fn option<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

/// Rank j's region: rank 0 has the target's `--name`, rank j > 0 `NAME-rj`.
pub fn region(name: &str, rank: usize) -> String {
    match rank {
        0 => name.to_string(),
        j => format!("{name}-r{j}"),
    }
}

/// Rank `rank`'s builtin words: the target's, with `--rank` and its own `--name`.
pub fn rank_args(args: &[String], rank: usize) -> Vec<String> {
    let name = option(args, "--name").unwrap_or_default().to_string();
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut words = args.iter();
    while let Some(a) = words.next() {
        if a == "--name" {
            words.next();
            continue;
        }
        out.push(a.clone());
    }
    out.extend([
        "--rank".into(),
        rank.to_string(),
        "--name".into(),
        region(&name, rank),
    ]);
    out
}

/// The builtin words with `{host}` in the j-th address of `--ranks` replaced by
/// `addresses[j]` (rank j's host's address; IPv6 in brackets), so one spec serves any
/// allocation (`slurm://+K` hosts); no addresses: the words as they are.
pub fn fill_rank_addresses(args: &[String], addresses: &[String]) -> Vec<String> {
    let mut out = args.to_vec();
    let Some(at) = args.iter().position(|a| a == "--ranks") else {
        return out;
    };
    if addresses.is_empty() || at + 1 >= args.len() {
        return out;
    }
    let filled: Vec<String> = (args[at + 1].split(',').enumerate())
        .map(|(j, entry)| match addresses.get(j) {
            Some(a) if a.contains(':') => entry.replace("{host}", &format!("[{a}]")),
            Some(a) => entry.replace("{host}", a),
            None => entry.to_string(),
        })
        .collect();
    out[at + 1] = filled.join(",");
    out
}

/// The URL a client group on rank `rank`'s host loads: that rank's region.
pub fn rank_url(args: &[String], rank: usize) -> String {
    format!(
        "kvd://{}",
        region(option(args, "--name").unwrap_or_default(), rank)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn each_rank_gets_its_rank_and_region() {
        let args = words("kvd --ranks 10.0.0.2:1,10.0.0.3:2 --name kv --poll spin");
        assert_eq!(
            rank_args(&args, 0),
            words("kvd --ranks 10.0.0.2:1,10.0.0.3:2 --poll spin --rank 0 --name kv")
        );
        assert_eq!(
            rank_args(&args, 1),
            words("kvd --ranks 10.0.0.2:1,10.0.0.3:2 --poll spin --rank 1 --name kv-r1")
        );
        assert_eq!(rank_url(&args, 0), "kvd://kv");
        assert_eq!(rank_url(&args, 1), "kvd://kv-r1");
        let filled = fill_rank_addresses(
            &words("kvd --ranks {host}:1,{host}:2 --name kv"),
            &["10.0.0.2".into(), "fd00::3".into()],
        );
        assert_eq!(
            filled,
            words("kvd --ranks 10.0.0.2:1,[fd00::3]:2 --name kv")
        );
        assert_eq!(fill_rank_addresses(&args, &[]), args);
        assert!(regex::Regex::new(RANK_READY)
            .unwrap()
            .is_match("kvd: rank 1 of 2 serving /dev/shm/x, pid 4; clients use kvd://kv-r1"));
    }
}
