//! Runs on a real Slurm cluster: Debian's slurmctld, slurmd and munge started by the test on
//! network-namespace hosts (tests/it/slurm_lab.rs). Skipped with a reason when not root or
//! without the packages (fails in CI). The nodes share this machine's CPUs and clock: these
//! tests check correctness, not speed.

use crate::slurm_lab::with_slurm;

use std::time::Duration;

#[test]
fn the_lab_cluster_runs_a_step_on_each_of_its_three_nodes() {
    with_slurm(3, |cluster| {
        let out = cluster.run(
            Duration::from_secs(30),
            "srun",
            &["-N", "3", "-n", "3", "--label", "hostname"],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "srun: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            cluster.logs()
        );
        let mut names: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(_, name)| name.trim())
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["h1", "h2", "h3"], "{stdout}");
    });
}

/// As on a real cluster: each node has its own /tmp, and shares the rest (here /var/tmp, where
/// the cluster's files are).
#[test]
fn the_lab_nodes_have_their_own_tmp_and_share_the_rest() {
    with_slurm(3, |cluster| {
        let here = tempfile::tempdir().unwrap();
        let private = here.path().join("mine");
        let shared = cluster.dir.join("shared");
        std::fs::write(&private, "x").unwrap();
        std::fs::write(&shared, "x").unwrap();
        let script = format!(
            "test -e {} && echo private-seen; test -e {} && echo shared-seen; true",
            private.display(),
            shared.display()
        );
        let out = cluster.run(
            Duration::from_secs(30),
            "srun",
            &["-N", "3", "-n", "3", "sh", "-c", &script],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.matches("shared-seen").count(), 3, "{stdout}");
        assert_eq!(stdout.matches("private-seen").count(), 0, "{stdout}");
    });
}
