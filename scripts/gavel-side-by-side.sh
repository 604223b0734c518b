#!/usr/bin/env bash
# Side-by-side timing of Gavel's Python simulator and hadar on Gavel's continuous workload:
#   max_min_fairness_perf, simulation_throughputs.json, 36 V100 : 36 P100 : 36 K80 (1 GPU/server),
#   Poisson arrivals lam = 720 s between jobs (5 jobs/h), seed 0, single-GPU jobs,
#   measurement window = job ids 4000..4999, rounds of 360 s, ECOS.
# Gavel printed ~20.45 h average JCT on this workload.
#
# Usage: scripts/gavel-side-by-side.sh [HADAR_BIN] [GAVEL_DIR]
#   (build hadar first: cargo build --release -p hadar-cli; HADAR_BIN target/release/hadar)
# Results of 2026-11-26 on the 2-core VM: docs/performance.md "Gavel side by side".
#   HADAR_BIN  hadar release binary            (default: $BENCH_DIR/hadar)
#   GAVEL_DIR  directory holding Gavel's scheduler/ (default: $BENCH_DIR/gavel)
# Environment (all optional):
#   BENCH_DIR   work dir for venv, trace, logs   (default: ./gavel-bench)
#   GAVEL_GIT   Gavel git dir to export scheduler/ from if GAVEL_DIR/scheduler is missing
#               (default: a clone of github.com/stanford-futuredata/gavel at commit c4fa400,
#               made in BENCH_DIR/gavel-src)
#   VENV        Python venv for Gavel            (default: $BENCH_DIR/venv; created if missing)
#   PYTHON      interpreter used to create it    (default: python3; 3.11.7 was used)
#   ROUNDS      alternated rounds                (default: 3)
#   QUIET_WAIT  max seconds to wait before each run for the machine to be idle (default: 180;
#               0 disables). The CPU-busy share just before each run is recorded in the table.
#   KEEP_FULL_LOGS=1  keep Gavel's full -v log (~400 MB per run); by default only head/tail kept.
set -euo pipefail

BENCH_DIR=${BENCH_DIR:-$PWD/gavel-bench}
mkdir -p "$BENCH_DIR"
BENCH_DIR=$(cd "$BENCH_DIR" && pwd)
HADAR=${1:-${HADAR:-target/release/hadar}}
GAVEL_DIR=${2:-${GAVEL_DIR:-$BENCH_DIR/gavel}}
if [[ -z ${GAVEL_GIT:-} && ! -f $GAVEL_DIR/scheduler/scheduler.py ]]; then
  GAVEL_GIT=$BENCH_DIR/gavel-src/.git
  if [[ ! -d $GAVEL_GIT ]]; then
    git clone -q https://github.com/stanford-futuredata/gavel "$BENCH_DIR/gavel-src"
    git -C "$BENCH_DIR/gavel-src" checkout -q c4fa40097339e9608ab71fd64c8bdea96a5e4a4c
  fi
fi
GAVEL_GIT=${GAVEL_GIT:-}
VENV=${VENV:-$BENCH_DIR/venv}
PYTHON=${PYTHON:-python3}
ROUNDS=${ROUNDS:-3}
QUIET_WAIT=${QUIET_WAIT:-180}
KEEP_FULL_LOGS=${KEEP_FULL_LOGS:-0}
TIME_FMT="%e s %M KB %U user %S sys"   # first two fields: the requested "%e s %M KB"

HADAR=$(readlink -f "$HADAR")
LOGS=$BENCH_DIR/logs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$LOGS"
RESULTS=$LOGS/results.tsv

[[ -x /usr/bin/time ]] || { echo "need GNU time: apt-get install -y time" >&2; exit 1; }
[[ -x $HADAR ]] || { echo "hadar binary not found: $HADAR" >&2; exit 1; }

# ---- 1. Gavel's source ------------------------------------------------------------------------
if [[ ! -f $GAVEL_DIR/scheduler/scheduler.py ]]; then
  [[ -d $GAVEL_GIT ]] || { echo "no $GAVEL_DIR/scheduler and no git dir $GAVEL_GIT" >&2; exit 1; }
  mkdir -p "$GAVEL_DIR"
  # Export only files whose blobs are present: a mirror may lack the large
  # traces/msr/seed=*/philly.trace blobs, which the simulator does not use.
  git -C "$GAVEL_GIT" ls-tree -r HEAD scheduler |
    while read -r _mode _type sha path; do
      git -C "$GAVEL_GIT" cat-file -e "$sha" 2>/dev/null && printf '%s\n' "$path"
    done > "$LOGS/gavel_paths.txt"
  # (git may still print "invalid object ... philly.trace" for the skipped blobs; it exits 0.)
  mapfile -t gavel_paths < "$LOGS/gavel_paths.txt"
  git --literal-pathspecs -C "$GAVEL_GIT" archive HEAD -- "${gavel_paths[@]}" | tar -x -C "$GAVEL_DIR"
  git -C "$GAVEL_GIT" rev-parse HEAD > "$GAVEL_DIR/COMMIT"
fi
GAVEL_SCHED=$(cd "$GAVEL_DIR/scheduler" && pwd)

# ---- 2. Python venv (versions Gavel was run with on this class of machine) --------------------
if [[ ! -x $VENV/bin/python ]]; then
  "$PYTHON" -m venv "$VENV" || { echo "venv failed: apt-get install -y python3-venv" >&2; exit 1; }
fi
cat > "$LOGS/constraints.txt" <<'EOF'
cffi==2.1.1
clarabel==0.11.1
cloudpickle==3.1.2
cvxpy==1.5.3
ecos==2.0.14
grpcio==1.85.1
grpcio-tools==1.85.1
Jinja2==3.1.6
joblib==1.6.0
MarkupSafe==3.0.4
matrix-completion==0.0.2
numpy==1.26.4
osqp==1.1.3
protobuf==7.36.2
psutil==7.2.2
pycparser==3.12
scikit-learn==1.5.2
scipy==1.13.1
scs==3.3.1
setuptools==84.2.1
threadpoolctl==3.8.0
typing_extensions==4.16.0
EOF
# What `import scheduler` needs: cvxpy+ECOS (policies), numpy, scipy, psutil (utils),
# matrix-completion (throughput_estimator; it imports sklearn), grpcio + protobuf (runtime/rpc),
# grpcio-tools (to generate the rpc stubs, which are not checked in).
if ! (cd "$GAVEL_SCHED" && "$VENV/bin/python" -c 'import scheduler, cvxpy; assert "ECOS" in cvxpy.installed_solvers()' 2>/dev/null); then
  "$VENV/bin/pip" install -q -c "$LOGS/constraints.txt" \
    cvxpy ecos numpy scipy scikit-learn psutil matrix-completion grpcio grpcio-tools protobuf
fi
if [[ ! -f $GAVEL_SCHED/runtime/rpc_stubs/common_pb2.py ]]; then   # = `make rpc_stubs`
  for p in iterator_to_scheduler scheduler_to_worker worker_to_scheduler common enums; do
    (cd "$GAVEL_SCHED" && "$VENV/bin/python" -m grpc_tools.protoc -Iruntime/protobuf \
       --python_out=runtime/rpc_stubs --grpc_python_out=runtime/rpc_stubs "runtime/protobuf/$p.proto")
  done
fi
(cd "$GAVEL_SCHED" && "$VENV/bin/python" -c 'import scheduler') || { echo "import scheduler failed" >&2; exit 1; }
"$VENV/bin/pip" freeze > "$LOGS/pip_freeze.txt"

# ---- 3. hadar trace (not part of the timed runs; timed once here) -----------------------------
TRACE=$BENCH_DIR/cont.trace
/usr/bin/time -f "$TIME_FMT" -o "$LOGS/trace_generate.time" \
  "$HADAR" trace generate --generator philly --jobs 8000 --jobs-per-hour 5 --seed 0 --out "$TRACE"

# ---- 4. commands -------------------------------------------------------------------------------
GAVEL_CMD=("$VENV/bin/python" scripts/drivers/simulate_scheduler_with_generated_jobs.py
  --throughputs_file simulation_throughputs.json -p max_min_fairness_perf
  -c 36:36:36 --num_gpus_per_server 1:1:1 -l 720 --seed 0 -s 4000 -e 5000 -i 360
  --solver ECOS -v)
HADAR_CMD=("$HADAR" simulate --trace "$TRACE" --cluster v100=36,p100=36,k80=36
  --policy max_min_fairness_perf --window 4000..5000)

{
  echo "date:    $(date -Is)"
  echo "host:    $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(. /etc/os-release; echo "$PRETTY_NAME")"
  echo "python:  $("$VENV/bin/python" --version 2>&1)"
  echo "gavel:   $GAVEL_SCHED ($(cat "$GAVEL_DIR/COMMIT" 2>/dev/null || echo 'commit unknown'))"
  echo "hadar:   $HADAR ($("$HADAR" --version))"
  echo "gavel cmd (in $GAVEL_SCHED): ${GAVEL_CMD[*]}"
  echo "hadar cmd: ${HADAR_CMD[*]} [--no-bound]"
  echo "trace generate: $(cat "$LOGS/trace_generate.time")"
} | tee "$LOGS/setup.txt"

# Share of CPU busy over 2 s (all cores), in percent.
cpu_busy() {
  local a b
  read -r _ a1 a2 a3 a4 a5 a6 a7 _ < /proc/stat; sleep 2
  read -r _ b1 b2 b3 b4 b5 b6 b7 _ < /proc/stat
  local idle=$(( (b4 + b5) - (a4 + a5) ))
  local total=$(( (b1+b2+b3+b4+b5+b6+b7) - (a1+a2+a3+a4+a5+a6+a7) ))
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}
wait_quiet() {   # wait (at most QUIET_WAIT s) for < 15% CPU busy; print the last reading
  local waited=0 busy
  busy=$(cpu_busy)
  while (( busy >= 15 && waited < QUIET_WAIT )); do sleep 8; waited=$((waited + 10)); busy=$(cpu_busy); done
  echo "$busy"
}

printf 'round\tsim\twall_s\tpeak_KB\tuser_s\tsys_s\tmean_jct_h\tmean_jct_s\tcpu_busy_before_%%\n' > "$RESULTS"

run_one() {   # run_one ROUND NAME -- command...
  local r=$1 name=$2; shift 3
  local log=$LOGS/${name}_r$r.log tf=$LOGS/${name}_r$r.time busy jct_h jct_s
  busy=$(wait_quiet)
  if [[ $name == gavel ]]; then
    (cd "$GAVEL_SCHED" && /usr/bin/time -f "$TIME_FMT" -o "$tf" "$@" > "$log" 2>&1)
    jct_s=$(grep -a '^Average job completion time:' "$log" | head -1 | awk '{print $5}')
    jct_h=$(grep -a '^Average job completion time:' "$log" | head -1 | sed 's/.*(\(.*\) hours).*/\1/')
    if [[ $KEEP_FULL_LOGS != 1 ]]; then
      { head -n 5 "$log"; echo "[... $(wc -l < "$log") lines, $(stat -c %s "$log") bytes in full; trimmed ...]"; tail -n 8 "$log"; } > "$log.trim"
      mv "$log.trim" "$log"
    fi
  else
    /usr/bin/time -f "$TIME_FMT" -o "$tf" "$@" > "$log" 2>&1
    jct_h=$(awk '$1=="max_min_fairness_perf"{print $4}' "$log")
    jct_s=-
  fi
  read -r wall _ kb _ user _ sys _ < "$tf"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$wall" "$kb" "$user" "$sys" "${jct_h:-?}" "${jct_s:-?}" "$busy" >> "$RESULTS"
  printf '  round %s %-16s %8s s %8s KB  mean JCT %s h  (cpu busy before: %s%%)\n' "$r" "$name" "$wall" "$kb" "${jct_h:-?}" "$busy"
}

# ---- 5. alternated rounds ---------------------------------------------------------------------
for r in $(seq 1 "$ROUNDS"); do
  run_one "$r" gavel          -- "${GAVEL_CMD[@]}"
  run_one "$r" hadar          -- "${HADAR_CMD[@]}"
  run_one "$r" hadar_no_bound -- "${HADAR_CMD[@]}" --no-bound
done

# ---- 6. table, medians, ratios ----------------------------------------------------------------
echo
column -t -s $'\t' "$RESULTS" | tee "$LOGS/table.txt"
echo
awk -F'\t' '
  NR > 1 { w[$2] = w[$2] " " $3; m[$2] = m[$2] " " $4; c[$2] = c[$2] " " ($5 + $6) }
  function med(s,   a, n, i, j, t) {
    n = split(s, a, " ");
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    printf "%-16s %12s %12s %12s\n", "median", "wall s", "peak KB", "cpu s";
    split("gavel hadar hadar_no_bound", k, " ");
    for (i = 1; i <= 3; i++) printf "%-16s %12.2f %12d %12.2f\n", k[i], med(w[k[i]]), med(m[k[i]]), med(c[k[i]]);
    print "";
    for (i = 2; i <= 3; i++)
      printf "Gavel / %-14s wall %.1fx   peak memory %.2fx   cpu %.1fx\n", k[i],
        med(w["gavel"]) / med(w[k[i]]), med(m["gavel"]) / med(m[k[i]]), med(c["gavel"]) / med(c[k[i]]);
  }' "$RESULTS" | tee "$LOGS/summary.txt"
echo
echo "logs: $LOGS"
