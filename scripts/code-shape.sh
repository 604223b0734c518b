#!/usr/bin/env bash
# The code's shape, checked (docs/design.md):
#   - core's (and model's) top-level modules import one another in one direction (no circle):
#     scripts/import_graph.py prints the graph;
#   - no production function (libraries and binaries; tests and benches aside) is over
#     80 lines, as clippy's too_many_lines counts them (code lines: comments and blank
#     lines aside; the threshold is clippy.toml's).
# Exits 1 if either fails, listing what does.
#
#   scripts/code-shape.sh
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
python3 scripts/import_graph.py core/src || status=1
echo
python3 scripts/import_graph.py model/src || status=1

echo
echo "# production functions over $(sed -n 's/^too-many-lines-threshold = //p' clippy.toml) lines"
out=$(cargo clippy --workspace --lib --bins --locked --message-format json -- \
  -W clippy::too_many_lines 2>/dev/null) || { echo "clippy failed: run cargo clippy" >&2; exit 2; }
long=$(python3 -c '
import json, sys
seen = set()
for line in sys.stdin:
    m = json.loads(line)
    d = m.get("message") or {}
    if m.get("reason") != "compiler-message" or (d.get("code") or {}).get("code") != "clippy::too_many_lines":
        continue
    span = next(s for s in d["spans"] if s["is_primary"])
    lines = d["message"].split("(")[-1].split("/")[0]
    seen.add("%s:%d: %s lines" % (span["file_name"], span["line_start"], lines))
print("\n".join(sorted(seen)))
' <<<"$out")
if [[ -n $long ]]; then
  echo "$long"
  echo "$(wc -l <<<"$long") functions"
  status=1
else
  echo "none"
fi
exit $status
