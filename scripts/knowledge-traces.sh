#!/usr/bin/env bash
# Measured against oracle over more than runs A and B: Hadar's mean JCT with
# --throughput-knowledge measured (0% and 10% progress noise) over Hadar's
# with the oracle, on Gavel's runs A and B and twelve more static traces of
# Gavel's offline generator (seeds 1-6, single-GPU and multi-GPU), with the
# geometric mean of the ratios. One trace's ratio moves by a point or two
# with any small change of the policy's inputs; the mean over fourteen moves
# less, which is why settings are chosen on it (docs/knowledge.md).
#
#   scripts/knowledge-traces.sh                       # release build first
#   HADAR=target/debug/hadar scripts/knowledge-traces.sh
#   scripts/knowledge-traces.sh --exploration-bonus 0.5   # extra simulate flags
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/hadar.sh

traces=(static_100jobs_multigpu_seed0.trace static_100jobs_singlegpu_seed0.trace)
for seed in 1 2 3 4 5 6; do
  "$hadar" trace generate --generator offline --jobs 100 --seed "$seed" \
    --out "$tmp/single-seed$seed.trace" >/dev/null
  "$hadar" trace generate --generator offline --jobs 100 --seed "$seed" --multi-gpu \
    --out "$tmp/multi-seed$seed.trace" >/dev/null
  traces+=("$tmp/single-seed$seed.trace" "$tmp/multi-seed$seed.trace")
done

echo "| trace | oracle mean JCT h | measured | measured, 10% noise |"
echo "|---|---|---|---|"
for t in "${traces[@]}"; do
  o=$(jct --trace "$t" --throughput-knowledge oracle "$@")
  m=$(jct --trace "$t" --throughput-knowledge measured "$@")
  n=$(jct --trace "$t" --throughput-knowledge measured --progress-noise 0.1 "$@")
  if [[ -z $o || -z $m || -z $n ]]; then
    echo "no mean JCT in simulate's output for $t (has its table changed?)" >&2
    exit 1
  fi
  echo "$(basename "$t" .trace) $o $m $n"
done | awk '
  { r0 = $3 / $2; r1 = $4 / $2; s0 += log(r0); s1 += log(r1); n++
    printf "| %s | %.2f | %.2f (%+.1f%%) | %.2f (%+.1f%%) |\n", $1, $2, $3, 100 * (r0 - 1), $4, 100 * (r1 - 1) }
  END { printf "| geometric mean of the ratios | | %+.1f%% | %+.1f%% |\n", 100 * (exp(s0 / n) - 1), 100 * (exp(s1 / n) - 1) }'
