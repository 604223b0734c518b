#!/usr/bin/env bash
# How much of a measured-against-oracle figure is the trace's luck: Hadar's
# mean JCT with --throughput-knowledge measured over Hadar's with the
# oracle, on Gavel's runs A and B, each under N copies of Gavel's table
# whose every rate (alone, and each side of each pair, the two rows of a
# pair moved alike) is multiplied by its own draw from [1 - F, 1 + F]
# (default 16 copies, F = 1%). Both modes run on the same perturbed table,
# which is the truth of that copy. Prints, per run, the mean, sd and range
# of measured over oracle in percent, how many copies are under 5%, the
# oracle's range, and each copy's figure (docs/knowledge.md). Needs python3.
# Extra arguments go to the measured runs only (as in knowledge.sh).
#
#   scripts/knowledge-perturbed.sh                    # release build first
#   COPIES=8 SPREAD=0.02 scripts/knowledge-perturbed.sh
#   HADAR=target/debug/hadar scripts/knowledge-perturbed.sh --progress-noise 0.1
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/hadar.sh

copies=${COPIES:-16}
spread=${SPREAD:-0.01}
python3 - "$tmp" "$copies" "$spread" <<'EOF'
import json, random, sys
out, copies, spread = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
table = json.load(open('core/data/gavel/simulation_throughputs.json'))
for seed in range(1, copies + 1):
    rng = random.Random(seed)
    draws = {}
    # One draw per rate: (type, kind, None) alone, (type, kind, other) for
    # the kind beside the other, so both rows of a pair move together.
    def draw(*key):
        if key not in draws:
            draws[key] = 1 + spread * (2 * rng.random() - 1)
        return draws[key]
    copy = {}
    for ty in sorted(table):
        copy[ty] = {}
        for kind in sorted(table[ty]):
            row = {}
            for other, v in sorted(table[ty][kind].items()):
                if isinstance(v, list):
                    row[other] = [v[0] * draw(ty, kind, other), v[1] * draw(ty, other, kind)]
                else:
                    row[other] = v * draw(ty, kind, None)
            copy[ty][kind] = row
    json.dump(copy, open(f'{out}/table-{seed}.json', 'w'))
EOF

for run in "A static_100jobs_multigpu_seed0.trace" "B static_100jobs_singlegpu_seed0.trace"; do
  read -r name trace <<<"$run"
  for seed in $(seq 1 "$copies"); do
    table=$tmp/table-$seed.json
    o=$(jct --trace "$trace" --throughputs "$table" --throughput-knowledge oracle)
    m=$(jct --trace "$trace" --throughputs "$table" --throughput-knowledge measured "$@")
    if [[ -z $o || -z $m ]]; then
      echo "no mean JCT in simulate's output for run $name, copy $seed" >&2
      exit 1
    fi
    echo "$o $m"
  done | awk -v name="$name" '
    { r = $2 / $1; s += r; ss += r * r; n++; under += (r < 1.05)
      lo = (n == 1 || r < lo) ? r : lo; hi = (n == 1 || r > hi) ? r : hi
      olo = (n == 1 || $1 < olo) ? $1 : olo; ohi = (n == 1 || $1 > ohi) ? $1 : ohi
      line = line sprintf(" %+.1f", 100 * (r - 1)) }
    END { if (!n) exit 1
      m = s / n; v = n > 1 ? (ss - n * m * m) / (n - 1) : 0; sd = v > 0 ? sqrt(v) : 0
      printf "run %s: measured over oracle, mean %+.1f%% (sd %.1f, %+.1f%% .. %+.1f%%), under 5%% in %d of %d; oracle mean JCT %.2f .. %.2f h\n  per copy:%s\n",
        name, 100 * (m - 1), 100 * sd, 100 * (lo - 1), 100 * (hi - 1), under, n, olo, ohi, line }'
done
