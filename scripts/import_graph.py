#!/usr/bin/env python3
"""The import graph of a crate's top-level modules, and its circles.

    python3 scripts/import_graph.py [core/src]   # exit 1 if modules import each other in a circle

Reads every `.rs` file under the crate's `src/`, attributes it to its top-level
module (`src/engine/view.rs` -> `engine`), and records an edge `a -> b` for
every `crate::b` path in `a`'s production code (test modules and `*tests.rs`
files are left out: a test may reach anywhere). Prints each module's imports,
then every strongly connected component with more than one module (a circle).
The crate root (`lib.rs`) only declares modules and re-exports, so it is not a
node. A module the root re-exports from another crate (`pub use
hadar_model::{cluster, error};` in core) is still reached as `crate::cluster`:
it is a node, marked with its crate, that imports nothing of this crate (a
crate below cannot import one above, so it closes no circle).
"""

import re
import sys
from pathlib import Path

CRATE_PATH = re.compile(r"\bcrate::(\w+)")
# `use crate::{a, b::c}`: the first names inside the braces.
CRATE_GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)
LINE_COMMENT = re.compile(r"//[^\n]*")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub\s+)?mod\s+\w+\s*;?")


def production_text(path: Path) -> str:
    """The file's text less comments and `#[cfg(test)] mod ... { }` blocks."""
    text = LINE_COMMENT.sub("", path.read_text())
    out, pos = [], 0
    for m in TEST_MOD.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.start()])
        if m.group(0).endswith(";"):
            pos = m.end()
            continue
        # Skip the braced block that follows.
        open_at = text.find("{", m.end())
        depth, i = 0, open_at
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        pos = i + 1
    out.append(text[pos:])
    return "".join(out)


def module_of(src: Path, path: Path) -> str | None:
    rel = path.relative_to(src)
    if rel.parts == ("lib.rs",) or rel.parts == ("main.rs",):
        return None
    return rel.parts[0].removesuffix(".rs")


# `pub use other_crate::{a, b};` or `pub use other_crate::a;` in the crate root.
REEXPORT = re.compile(r"\bpub\s+use\s+(\w+)::(?:\{([^}]*)\}|(\w+))\s*;")


def reexported(src: Path, local: set[str]) -> dict[str, str]:
    """Lower-case names (modules) the root re-exports from another crate, with that crate."""
    root = next((src / n for n in ("lib.rs", "main.rs") if (src / n).is_file()), None)
    if root is None:
        return {}
    out = {}
    for m in REEXPORT.finditer(LINE_COMMENT.sub("", root.read_text())):
        source, group, single = m.groups()
        if source in ("crate", "self", "super") or source in local:
            continue
        for name in re.findall(r"\w+", group or single):
            if name[0].islower() and name not in local:
                out[name] = source
    return out


def graph(src: Path) -> dict[str, set[str]]:
    modules = {module_of(src, p) for p in src.rglob("*.rs")} - {None}
    modules |= set(reexported(src, modules))
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for path in sorted(src.rglob("*.rs")):
        m = module_of(src, path)
        if m is None or path.name.endswith("tests.rs"):
            continue
        text = production_text(path)
        names = set(CRATE_PATH.findall(text))
        for group in CRATE_GROUP.findall(text):
            names.update(re.findall(r"(?:^|,)\s*(\w+)", group))
        edges[m].update(n for n in names if n in modules and n != m)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "core/src")
    if not src.is_dir():
        print(f"import_graph: {src} is not a directory (give a crate's src/)", file=sys.stderr)
        return 2
    edges = graph(src)
    outside = reexported(src, {module_of(src, p) for p in src.rglob("*.rs")} - {None})
    print(f"# imports between the top-level modules of {src}")
    for m in sorted(edges):
        if m in outside:
            print(f"{m} -> (re-exported from {outside[m]})")
            continue
        print(f"{m} -> {', '.join(sorted(edges[m])) or '(nothing)'}")
    found = circles(edges)
    if not found:
        print("no circle")
        return 0
    for comp in found:
        inner = [f"{a}->{b}" for a in comp for b in sorted(edges[a]) if b in comp]
        print(f"circle: {', '.join(comp)}  ({'; '.join(inner)})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
