# Sourced by pg-hot-row.sh and pg-sync-commit.sh: the sampler both keep beside their server.
#   pg_sample PORT METRICS LOG QUERY NAME_A NAME_B
# starts, in the background, a loop that waits for the server on PORT to answer, then runs
# QUERY (two counts a row) every 100 ms through one psql and keeps in METRICS (JSON,
# rewritten after each sample) the samples taken and each count summed:
#   {"samples": N, "NAME_A": SUM_A, "NAME_B": SUM_B}
# Its errors go to LOG. It is a child of the calling shell, not of the postmaster (which would
# take its exit for a crashed backend) nor an orphan (stairbench ends those after each step).
pg_sample() {
    printf '{"samples": 0, "%s": 0, "%s": 0}\n' "$5" "$6" >"$2"
    {
        tries=0
        until psql -At -h 127.0.0.1 -p "$1" -U postgres -c 'SELECT 1' postgres >/dev/null 2>&1; do
            tries=$((tries + 1))
            [ $tries -lt 600 ] || exit 1
            sleep 0.1
        done
        n=0 sum_a=0 sum_b=0
        printf '%s \\watch 0.1\n' "$4" |
            stdbuf -oL psql -At -F ' ' -h 127.0.0.1 -p "$1" -U postgres postgres 2>/dev/null |
            while read -r a b; do
                n=$((n + 1)) sum_a=$((sum_a + a)) sum_b=$((sum_b + b))
                printf '{"samples": %d, "%s": %d, "%s": %d}\n' $n "$5" $sum_a "$6" $sum_b >"$2.tmp"
                mv "$2.tmp" "$2"
            done
    } 2>>"$3" &
}
