#!/usr/bin/env bash
# What a step costs on Slurm hosts against ssh hosts: the same spec (a server on the first
# host, a client group on each of the two others, three 1.5-s steps) run over ssh and inside
# `salloc -N 3` on the namespace test cluster (three network-namespace hosts, each with sshd
# and slurmd, on this machine), alternating which goes first, ROUNDS times each. Prints the
# medians and ranges of what the runs recorded: each host's set-up (environment.json), each
# step's fetch and common start (steps.jsonl's groups_overhead), and the Slurm/ssh ratios.
# Needs root and Debian's openssh-server, slurmctld, slurmd, slurm-client and munge.
# Usage: bench/slurm_vs_ssh.sh [ROUNDS]      (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
export STAIRBENCH_ROUNDS=${1:-5}
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
nice -n 10 cargo test --release --test it -- --ignored slurm_cost::slurm_vs_ssh_overhead \
    --exact --nocapture --test-threads 1
