"""The table of scripts/sia-race.sh: Sia's runs and Hadar's, side by side.

Sia's figures come from its own output: the per-job JCTs it prints last,
its log's final record (restarts per job) and /usr/bin/time -v; Hadar's
from `hadar simulate --json`.
"""
import ast
import csv
import json
import re
import statistics
import sys
from pathlib import Path


def p99(values):
    """The 99th percentile as `hadar simulate` computes it (core's
    `stats::quantile`): linear between the two nearest ranks."""
    s = sorted(values)
    pos = 0.99 * (len(s) - 1)
    lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def usage(time_file):
    text = time_file.read_text()
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", text)
    parts = [float(x) for x in m.group(1).split(":")]
    wall = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return wall, rss / 1024


def sia_row(out, name, run, submit):
    stdout = (out / f"{name}.sia-{run}.out").read_text()
    start = stdout.rfind("\n{'")
    if start < 0 or "Average JCT" not in stdout:
        sys.exit(f"{out / (name + '.sia-' + run + '.out')}: Sia did not finish (no per-job JCTs)")
    jcts = ast.literal_eval(stdout[start + 1 : stdout.index("}", start) + 1])
    last = (out / f"{name}.sia-{run}.log").read_text().strip().splitlines()[-1]
    jobs = json.loads(last)["submitted_jobs"]
    starts = statistics.mean(1 + (j["num_restarts"] or 0) for j in jobs)
    wall, rss = usage(out / f"{name}.sia-{run}.time")
    # From t = 0, as `hadar simulate` counts it (arrivals are not shifted).
    makespan = max(submit[j] + t for j, t in jcts.items())
    return (statistics.mean(jcts.values()), p99(jcts.values()), makespan, starts, wall, rss)


def hadar_row(out, name, policy):
    d = json.loads((out / f"{name}.hadar-{policy}.json").read_text())[0]
    # The whole process, as for Sia (reading, simulating, writing).
    wall, rss = usage(out / f"{name}.hadar-{policy}.time")
    return (d["avg_jct_s"], d["p99_jct_s"], d["makespan_s"], d["starts_per_job"], wall, rss)


def main():
    out, sia, workloads = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
    print("| workload | scheduler | mean JCT s | p99 JCT s | makespan s | starts/job | wall s | peak MB |")
    print("|---|---|---|---|---|---|---|---|")
    for w in workloads:
        name = w.replace("/", "-")
        with open(sia / "workloads" / f"{w}.csv") as f:
            submit = {r["name"]: float(r["time"]) for r in csv.DictReader(f)}
        rows = [(f"Sia ({run})", sia_row(out, name, run, submit)) for run in ("adaptive", "rigid")]
        rows.append(("Sia's Gavel port (360 s rounds)", sia_row(out, name, "gavel", submit)))
        # As submitted first, then tuned, then elastic.
        def order(p):
            run = p.name[len(name) + len(".hadar-") : -len(".json")]
            return (run.startswith("elastic-"), run.startswith("tuned-"), run)

        for p in sorted(out.glob(f"{name}.hadar-*.json"), key=order):
            policy = p.name[len(name) + len(".hadar-") : -len(".json")]
            row = hadar_row(out, name, policy)
            round_s = json.loads(p.read_text())[0]["settings"]["round_s"]
            how = []
            for shapes in ("tuned", "elastic"):
                if policy.startswith(shapes + "-"):
                    policy = policy[len(shapes) + 1 :]
                    how.append(f"`--shapes {shapes}`")
            if policy.endswith("-price1"):
                policy = policy[: -len("-price1")]
                how.append("`--hadar-price-base 1`")
            who = ", ".join([f"Hadar's `{policy}`"] + how) + f" ({round_s:.0f} s rounds)"
            rows.append((who, row))
        for who, (mean, tail, makespan, starts, wall, rss) in rows:
            print(f"| {w} | {who} | {mean:,.0f} | {tail:,.0f} | {makespan:,.0f} | {starts:.2f} | {wall:.2f} | {rss:.0f} |")


main()
