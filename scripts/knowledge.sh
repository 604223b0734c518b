#!/usr/bin/env bash
# The throughput-knowledge comparison of docs/results.md: Hadar planning on
# the table's rates (oracle) beside Hadar planning on rates it measured
# (measured, with 0% and 10% progress noise), and Gavel's policies given
# the oracle table, on Gavel's runs A and B and its continuous workload at
# 5 jobs/h. Prints markdown to stdout.
#
#   scripts/knowledge.sh > /tmp/knowledge.md        # release build first
#   HADAR=target/debug/hadar scripts/knowledge.sh   # any hadar binary
#   GAVEL=0 scripts/knowledge.sh                    # Hadar only (Gavel's
#       min_total_duration_perf and finish_time_fairness_perf take ~14 min
#       of the continuous workload's debug-build run)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/hadar.sh

gavel=max_min_fairness_perf,min_total_duration_perf,finish_time_fairness_perf,fifo_perf
# One workload: Hadar oracle / measured / measured+10% noise (sharing on,
# then off), then Gavel's policies (oracle). Arguments: simulate's inputs.
compare() {
  for share in 0.05 off; do
    echo
    echo "Hadar, \`--hadar-share $share\`:"
    echo
    echo '```'
    for k in "oracle 0" "measured 0" "measured 0.1"; do
      read -r knowledge noise <<<"$k"
      echo "# --throughput-knowledge $knowledge --progress-noise $noise"
      "$hadar" simulate "$@" --policy hadar --hadar-share "$share" \
        --throughput-knowledge "$knowledge" --progress-noise "$noise" |
        sed -n '/^policy/,/^hadar /p;/^  hadar:/p'
    done
    echo '```'
  done
  [ "${GAVEL:-1}" = 0 ] && return
  echo
  echo "Gavel's policies, oracle:"
  echo
  echo '```'
  "$hadar" simulate "$@" --policy "$gavel" | sed -n '/^policy/,/^$/p'
  echo '```'
}

echo "### Run A: static_100jobs_multigpu_seed0.trace, v100=4,p100=4,k80=4"
compare --trace static_100jobs_multigpu_seed0.trace --no-bound
echo
echo "### Run B: static_100jobs_singlegpu_seed0.trace, v100=4,p100=4,k80=4"
compare --trace static_100jobs_singlegpu_seed0.trace --no-bound
"$hadar" trace generate --generator philly --jobs 8000 --jobs-per-hour 5 --seed 0 \
  --out "$tmp/cont-5.trace" >/dev/null
echo
echo "### Continuous, 5 jobs/h (8000 jobs, seed 0), v100=36,p100=36,k80=36, window 4000..5000"
(cd "$tmp" && compare --trace cont-5.trace --cluster v100=36,p100=36,k80=36 \
  --window 4000..5000 --no-bound)
