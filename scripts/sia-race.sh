#!/usr/bin/env bash
# Runs Sia's simulator (SOSP'23) and `hadar simulate` side by side on Sia's
# own workloads, restart costs charged on both sides, and prints the table
# of docs/results.md ("Against Sia").
#
#   scripts/sia-race.sh SIA_SIMULATOR_DIR [WORKLOAD ...]
#
# SIA_SIMULATOR_DIR is the `sia-simulator/` directory of a checkout of
# github.com/siasosp23/artifacts (not shipped with Hadar: it has no license).
# WORKLOADs are paths under its workloads/ (default: saturn/workload-1
# philly/workload-1). Sia's Python dependencies are installed from PyPI wheels
# into $SIA_VENV (default target/sia-venv); results go to $OUT (default
# target/sia-race). Each Sia run takes 3-6 minutes and ~250 MB; three per
# workload (its policy on adaptive jobs, its policy with every job rigid,
# its Gavel port).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
sia=$(cd "${1:?usage: scripts/sia-race.sh SIA_SIMULATOR_DIR [WORKLOAD ...]}" && pwd)
shift
[[ -f $sia/multi_simulator.py && -d $sia/traces ]] ||
    { echo "$sia: not Sia's sia-simulator directory (no multi_simulator.py, traces/)" >&2; exit 2; }
workloads=("${@:-saturn/workload-1}")
[[ $# -gt 0 ]] || workloads+=(philly/workload-1)
# Absolute: Sia runs from its own directory.
mkdir -p "${SIA_VENV:-$here/target/sia-venv}" "${OUT:-$here/target/sia-race}"
venv=$(cd "${SIA_VENV:-$here/target/sia-venv}" && pwd)
out=$(cd "${OUT:-$here/target/sia-race}" && pwd)
if [[ -n ${HADAR:-} ]]; then
    hadar=$HADAR
else
    cargo build -q --release -p hadar-cli --manifest-path "$here/Cargo.toml"
    hadar=$here/target/release/hadar
fi
# Hadar's policies at Sia's 60 s rounds; Gavel's at Gavel's 360 s, as Sia
# runs its Gavel port (at 60 s they move jobs every round and pay for it).
policies=(hadar:60 hadare:60 max_min_fairness_perf:360 fifo_perf:360)
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 2; }

if [[ ! -x $venv/bin/python ]]; then
    echo "setting up Sia's Python environment in $venv (PyPI wheels)" >&2
    python3 -m venv "$venv"
    # pandas < 2: applications.py calls DataFrame.append. cylp: Sia's MIP
    # asks cvxpy for CBC; ecos: its Gavel port. rich, psutil: imported but
    # missing from its requirements.
    "$venv/bin/pip" install -q "numpy==1.23.5" "pandas==1.5.3" "scipy==1.11.4" \
        "cvxpy==1.6.7" "cylp==0.93.0" "ecos==2.0.14" autograd rich psutil
fi

sia_flags=(--policy=sia --policy_p_val=-0.5 --mip_lambda_a=0.01 --mip_lambda_n=1.1
    --interval=60 --project_throughput --share_max_replicas)
for w in "${workloads[@]}"; do
    name=${w//\//-}
    csv=$sia/workloads/$w.csv
    [[ -f $csv ]] || { echo "$csv: no such workload" >&2; exit 2; }
    # Every job rigid: Sia's `category` column (what its
    # utils/categorize_jobs.py --percent_rigid 100 writes).
    python3 - "$csv" "$out/$name-rigid.csv" <<'PY'
import csv, sys
with open(sys.argv[1], newline="") as f:
    rows = [r for r in csv.DictReader(f) if any(v.strip() for v in r.values() if v)]
names = [c for c in rows[0] if c != "category"] + ["category"]
with open(sys.argv[2], "w", newline="") as f:
    w = csv.DictWriter(f, names, lineterminator="\n")
    w.writeheader()
    w.writerows({**{c: r[c] for c in names[:-1]}, "category": "rigid"} for r in rows)
PY
    for run in adaptive rigid gavel; do
        [[ -s $out/$name.sia-$run.out ]] && grep -q '^Average JCT' "$out/$name.sia-$run.out" && continue
        case $run in
            adaptive) args=("$csv" "${sia_flags[@]}") ;;
            rigid) args=("$out/$name-rigid.csv" "${sia_flags[@]}") ;;
            gavel) args=("$csv" --policy=gavel --interval=360) ;;
        esac
        echo "$name: Sia ($run)..." >&2
        (cd "$sia" && /usr/bin/time -v -o "$out/$name.sia-$run.time" "$venv/bin/python" -W ignore \
            multi_simulator.py "${args[@]}" --output="$out/$name.sia-$run.log" >"$out/$name.sia-$run.out" 2>&1)
    done
    "$hadar" trace import sia --workload "$csv" --sia "$sia" --out "$out/$name" --json >/dev/null
    # The same workload with each job's GPUs and batch tuned per type from
    # its profile, and elastic (several gangs a type; docs/sia.md); Gavel's
    # policies take one gang per job, so they run the workload as submitted.
    for shapes in tuned elastic; do
        "$hadar" trace import sia --workload "$csv" --sia "$sia" --out "$out/$name-$shapes" \
            --shapes "$shapes" --json >/dev/null
    done
    # RUN:ROUND_S[:EXTRA FLAGS]; RUN is [SHAPES-]POLICY[-NAME].
    for pr in "${policies[@]}" tuned-hadar:60 elastic-hadar:60 elastic-hadare:60 \
        "elastic-hadar-price1:60:--hadar-price-base 1"; do
        IFS=: read -r run round extra <<<"$pr"
        p=$run dir=$out/$name
        for shapes in tuned elastic; do
            [[ $run == "$shapes"-* ]] && p=${run#"$shapes"-} dir=$out/$name-$shapes
        done
        p=${p%-price1}
        # shellcheck disable=SC2086 # EXTRA is flags, split on purpose
        /usr/bin/time -v -o "$out/$name.hadar-$run.time" "$hadar" simulate --jobs "$dir/jobs.toml" \
            --cluster "$dir/cluster.toml" --round-seconds "$round" --no-bound --policy "$p" $extra \
            --json >"$out/$name.hadar-$run.json"
    done
done
python3 "$here/scripts/sia_race_table.py" "$out" "$sia" "${workloads[@]}"
