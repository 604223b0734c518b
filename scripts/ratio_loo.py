#!/usr/bin/env python3
# Leave-one-out error of the type-ratio model (core/src/estimate) on Gavel's
# simulation table, beside a mean-of-logs (least-squares rank-1) fit and a
# nearest-reference-jobs model (Gavel-like, needs two measured types).
# docs/algorithm.md quotes it.   python3 scripts/ratio_loo.py
import json, math, statistics, itertools, re
t = json.load(open('core/data/gavel/simulation_throughputs.json'))
types = ['v100','p100','k80']
kinds = {}
for ty in types:
    for key, rates in t[ty].items():
        r = rates.get('null', 0)
        kinds.setdefault(key, {})[ty] = r
kinds = {k: v for k, v in kinds.items() if all(v.get(x, 0) > 0 for x in types)}
L = {k: {ty: math.log(v[ty]) for ty in types} for k, v in kinds.items()}
names = list(L)
def ratio(others, s, tt, agg):
    d = [L[o][tt] - L[o][s] for o in others]
    return agg(d)
def errs(method, seen_count):
    out = []
    for k in names:
        others = [o for o in names if o != k]
        for tt in types:
            rest = [s for s in types if s != tt]
            for seen in itertools.combinations(rest, seen_count):
                if method == 'median':
                    g = statistics.median([L[k][s] + ratio(others, s, tt, statistics.median) for s in seen])
                elif method == 'mean':
                    g = statistics.mean([L[k][s] + ratio(others, s, tt, statistics.mean) for s in seen])
                elif method == 'knn':
                    if seen_count < 2:
                        continue
                    a, b = seen
                    fp = L[k][b] - L[k][a]
                    near = sorted(others, key=lambda o: abs((L[o][b] - L[o][a]) - fp))[:3]
                    g = statistics.median([L[k][a] + L[o][tt] - L[o][a] for o in near])
                out.append(abs(math.exp(g - L[k][tt]) - 1))
    return out
print(len(names), 'kinds with rates on all three types')
for seen in (1, 2):
    for m in ('median', 'mean', 'knn'):
        e = errs(m, seen)
        if not e: continue
        e.sort()
        w10 = sum(x <= 0.1 for x in e) / len(e)
        print(f'seen {seen} type(s), {m:6}: median err {statistics.median(e)*100:.1f}%, p90 {e[int(0.9*len(e))]*100:.1f}%, within 10%: {w10*100:.0f}% (n={len(e)})')
