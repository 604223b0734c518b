#!/usr/bin/env bash
# What declaring uneven batch shares gains (docs/algorithm.md, "Uneven batch
# shares"): Hadar's makespan and mean JCT on Gavel's runs A and B and the
# continuous 5 jobs/h workload, with 0%, 50% and 100% of the jobs declaring
# them (`hadar simulate --uneven-batches`). Needs: a release build (made if
# HADAR is not set). Run from the repository root: scripts/uneven-batches.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/hadar.sh

# makespan h and mean JCT h of `hadar` for simulate's arguments, then the
# same with the planner crediting uneven gangs (--hadar-uneven-credit).
row() {
  local a b
  a=$("$hadar" simulate --no-bound --policy hadar "$@" | awk '/^hadar /{print $2 " | " $4}')
  b=$("$hadar" simulate --no-bound --policy hadar --hadar-uneven-credit "$@" | awk '/^hadar /{print $2 " | " $4}')
  echo "$a | $b"
}

"$hadar" trace generate --generator philly --jobs 8000 --jobs-per-hour 5 --seed 0 \
  --out "$tmp/cont-5.trace" >/dev/null
echo "| workload | declaring | makespan h | mean JCT h | makespan h, credit | mean JCT h, credit |"
echo "|---|---|---|---|---|---|"
for share in 0 0.5 1; do
  echo "| run A | $share | $(row --trace static_100jobs_multigpu_seed0.trace --uneven-batches "$share") |"
done
for share in 0 0.5 1; do
  echo "| run B | $share | $(row --trace static_100jobs_singlegpu_seed0.trace --uneven-batches "$share") |"
done
for share in 0 0.5 1; do
  echo "| continuous 5/h | $share | $(cd "$tmp" && row --trace cont-5.trace --cluster v100=36,p100=36,k80=36 \
    --window 4000..5000 --uneven-batches "$share") |"
done
