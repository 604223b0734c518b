#!/usr/bin/env bash
# Inference quality of HadarE against Hadar on real runs (issue 16): the jobs
# of examples/local/quality.toml (the example trainer's MLP) on
# examples/local/cluster.toml, local backend, under each policy for the same
# wall-clock budget, then every job's final test accuracy, read by evaluating
# its collected checkpoint (for HadarE the copies' average) with the trainer.
# Writes docs/inference-quality.md (scripts/compare.sh copies it into
# docs/results.md).
#
#   scripts/inference-quality.sh               # 10 repeats, 30 s budget, 5 s rounds
#   SEEDS=3 BUDGET=20 ROUND=5 PROFILE=dev scripts/inference-quality.sh
#
# Settings (environment): SEEDS (repeats: HADAR_TRAINER_SEED, the jobs'
# initial weights and data orders), BUDGET (seconds from launch to `hadar
# stop`), ROUND (--round-seconds), PROFILE (cargo profile of both binaries:
# release, or dev for a quicker build), BUILD (0: use the binaries already
# built for PROFILE), POLICIES (default "hadar hadare"), OUT (default
# docs/inference-quality.md).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v jq > /dev/null || { echo "inference-quality.sh needs jq (apt-get install jq)" >&2; exit 1; }
seeds=${SEEDS:-10}
budget=${BUDGET:-30}
round=${ROUND:-5}
profile=${PROFILE:-release}
policies=${POLICIES:-"hadar hadare"}
out=${OUT:-docs/inference-quality.md}
if [ "${BUILD:-1}" != 0 ]; then
  cargo build --profile "$profile" -q -p hadar-example-trainer -p hadar-cli
fi
dir=target/$([ "$profile" = dev ] && echo debug || echo "$profile")
hadar=$(pwd)/$dir/hadar
trainer=$(pwd)/$dir/hadar-trainer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
names=($(sed -n 's/^name = "\(.*\)"/\1/p' examples/local/quality.toml))

# The test accuracy and step of checkpoint $1 (an MLP's): resuming at a total
# of 0 iterations evaluates it without training.
evaluate() {
  rm -rf "$tmp/eval" && mkdir "$tmp/eval"
  cp "$1" "$tmp/eval/resume.safetensors"
  HADAR_TRAINER_MODEL=mlp HADAR_TOTAL_ITERATIONS=0 HADAR_CHECKPOINT_DIR="$tmp/eval" "$trainer" \
    2> /dev/null | sed -n 's/^HADAR_DONE {"accuracy":\([0-9.]*\),.*"step":\([0-9]*\)}$/\1 \2/p'
}

# One run: policy $1, repeat $2; appends "policy seed job accuracy step work"
# rows (work: iterations in the collected checkpoints, every copy's counted).
run() {
  local policy=$1 seed=$2 state=$tmp/run-$1-$2
  # The repeat's seeds: each job's own plus 1000 * the repeat.
  awk -v s="$seed" -v t="$trainer" '
    /^command = / { print "command = [\"" t "\"]"; next }
    { if (match($0, /HADAR_TRAINER_SEED = "[0-9]+"/)) {
        v = substr($0, RSTART + 22, RLENGTH - 23) + 1000 * s
        $0 = substr($0, 1, RSTART - 1) "HADAR_TRAINER_SEED = \"" v "\"" substr($0, RSTART + RLENGTH) }
      print }' examples/local/quality.toml > "$tmp/jobs.toml"
  "$hadar" run --cluster examples/local/cluster.toml --jobs "$tmp/jobs.toml" --policy "$policy" \
    --round-seconds "$round" --state "$state" > "$state.log" 2>&1 &
  local pid=$!
  sleep "$budget"
  "$hadar" stop --state "$state" --wait 120 > /dev/null 2>&1
  local rc=0
  wait "$pid" || rc=$?
  if [ "$rc" -ne 8 ]; then
    echo "hadar run ($policy, repeat $seed) exited $rc, not 8 (stopped on request):" >&2
    tail -20 "$state.log" >&2
    exit 1
  fi
  "$hadar" status --state "$state" --json > "$state.status"
  for i in "${!names[@]}"; do
    local ckpt=$state/jobs/$i/latest.safetensors work
    work=$(jq ".jobs[] | select(.id == $i) | .checkpointed" "$state.status")
    if [ -f "$ckpt" ]; then
      echo "$policy $seed ${names[$i]} $(evaluate "$ckpt") $work"
    else
      echo "$policy $seed ${names[$i]} 0.25 0 0" # no checkpoint: an untrained model is at chance
    fi
  done >> "$tmp/rows"
}

for seed in $(seq 0 $((seeds - 1))); do
  for policy in $policies; do
    echo "repeat $seed, $policy ..." >&2
    run "$policy" "$seed"
  done
done

# mean and sample standard deviation of column $2 over the rows matching $1,
# with $3 decimals.
stats() {
  awk -v p="$1" -v c="$2" -v d="$3" '$1 == p { n++; s += $c; q += $c * $c }
    END { m = s / n; v = n > 1 ? (q - n * m * m) / (n - 1) : 0; if (v < 0) v = 0
          printf "%." d "f ± %." d "f", m, sqrt(v) }' "$tmp/rows"
}
# per-repeat means (of the jobs), then their mean and spread.
per_repeat() {
  awk -v p="$1" '$1 == p { s[$2] += $4; n[$2]++ } END { for (k in s) print p, k, 0, s[k] / n[k] }' \
    "$tmp/rows" > "$tmp/means"
  awk '{ n++; s += $4; q += $4 * $4 } END { m = s / n; v = n > 1 ? (q - n * m * m) / (n - 1) : 0
    if (v < 0) v = 0; printf "%.4f ± %.4f", m, sqrt(v) }' "$tmp/means"
}

# HadarE's per-repeat mean accuracy minus Hadar's, one a line into $tmp/diff;
# prints them on one line.
paired_repeats() {
  awk '{ s[$1 " " $2] += $4; n[$1 " " $2]++ }
    END { for (k in s) { split(k, a, " "); if (a[1] == "hadare") print a[2], s[k] / n[k] - s["hadar " a[2]] / n["hadar " a[2]] } }' \
    "$tmp/rows" | sort -n | awk '{ print $2 }' > "$tmp/diff"
  awk '{ printf "%s%+.4f", (NR > 1 ? ", " : ""), $1 }' "$tmp/diff"
}
# The same for each job HadarE forked (work above its step) against Hadar's.
paired_forked() {
  awk '$1 == "hadar" { h[$2 " " $3] = $4 } $1 == "hadare" && $6 > $5 { f[$2 " " $3] = $4 }
    END { for (k in f) print f[k] - h[k] }' "$tmp/rows" > "$tmp/fdiff"
  awk '{ printf "%s%+.4f", (NR > 1 ? ", " : ""), $1 }' "$tmp/fdiff"
}
paired_stats() {
  awk '{ n++; s += $1; q += $1 * $1 } END { if (n == 0) { printf "none"; exit }
    m = s / n; v = n > 1 ? (q - n * m * m) / (n - 1) : 0; if (v < 0) v = 0
    printf "%+.4f ± %.4f", m, sqrt(v) }' "$1"
}

{
  echo "## Inference quality: HadarE vs Hadar on real runs"
  echo
  echo "Generated by \`SEEDS=$seeds BUDGET=$budget ROUND=$round PROFILE=$profile"
  echo "scripts/inference-quality.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores, $(uname -m),"
  echo "shared with other work). Each repeat runs \`hadar run --cluster examples/local/cluster.toml"
  echo "--jobs examples/local/quality.toml --policy P --round-seconds $round\` (local backend; the"
  echo "repeat's \`HADAR_TRAINER_SEED\` set per job), stops it with \`hadar stop\` $budget s after"
  echo "launch, and evaluates each job's collected checkpoint (HadarE: the copies' average) on"
  echo "the MLP's 10,000 test points. Three jobs, four GPUs of equal real speed: Hadar leaves one"
  echo "idle, HadarE runs a copy on it."
  echo
  echo "| policy | jobs × repeats | test accuracy, mean ± sd over jobs | per-repeat mean, mean ± sd | checkpoint step | iterations done (all copies) |"
  echo "|---|---:|---:|---:|---:|---:|"
  for policy in $policies; do
    n=$(awk -v p="$policy" '$1 == p' "$tmp/rows" | wc -l)
    echo "| $policy | $n | $(stats "$policy" 4 4) | $(per_repeat "$policy") | $(stats "$policy" 5 0) | $(stats "$policy" 6 0) |"
  done
  if [ "$policies" = "hadar hadare" ]; then
    echo
    echo "Paired (same repeat, same seeds): HadarE's mean accuracy minus Hadar's, per repeat:"
    echo "$(paired_repeats) (mean ± sd: $(paired_stats "$tmp/diff"), higher in $(awk '$1 > 0' "$tmp/diff" | wc -l)"
    echo "of $seeds repeats). The jobs HadarE ran as copies (iterations done above the checkpoint's"
    echo "step), against the same job and repeat under Hadar: $(paired_forked) (mean ± sd:"
    echo "$(paired_stats "$tmp/fdiff"), higher in $(awk '$1 > 0' "$tmp/fdiff" | wc -l) of $(wc -l < "$tmp/fdiff"))."
  fi
  echo
  echo "Every job (policy, repeat, job, test accuracy, step of its checkpoint, iterations"
  echo "done by all its copies):"
  echo
  echo '```'
  cat "$tmp/rows"
  echo '```'
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out" >&2
