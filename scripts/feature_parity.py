#!/usr/bin/env python3
"""Checks that `hadar-cli` alone resolves its dependencies with the features
the workspace's test build gives them.

The wheel is built by maturin from hadar-cli alone; where a dependency's
features differ from the test build's, it and everything above it are
compiled a second time (minutes of CI). cli/Cargo.toml turns those features
on itself (feature unification, as a cargo-hakari workspace-hack does); this
says which are missing when a new dependency or feature brings a difference.

    scripts/feature_parity.py      # exit 1, naming the crates, if they differ
"""

import re
import subprocess
import sys


def features(args: list[str]) -> dict[str, str]:
    """Each package's resolved features, as `cargo tree` prints them."""
    run = subprocess.run(
        ["cargo", "tree", "--locked", "--offline", "--prefix", "none", "-f", "{p} [{f}]", *args],
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        sys.exit(f"cargo tree {' '.join(args)} failed:\n{run.stderr}")
    out = run.stdout
    found: dict[str, str] = {}
    for line in out.splitlines():
        m = re.match(r"^(\S+ v\S+)(?: \(.*?\))?(?: \(\*\))? \[(.*)\]$", line.strip())
        if m:
            found[m.group(1)] = m.group(2)
    return found


def main() -> int:
    # The test build: every member, every target, dev-dependencies included.
    tests = features(["--workspace", "-e", "normal,build,dev"])
    # What maturin builds: hadar-cli's binary, without its dev-dependencies.
    wheel = features(["-p", "hadar-cli", "-e", "normal,build"])
    differ = [
        f"  {pkg}: tests [{tests[pkg]}], hadar-cli alone [{feats}]"
        for pkg, feats in sorted(wheel.items())
        if pkg in tests and tests[pkg] != feats
    ]
    if differ:
        print(
            "hadar-cli alone resolves these dependencies with other features than the test "
            "build, so the wheel compiles them again; add the missing features to the "
            "feature-unification block of cli/Cargo.toml:\n" + "\n".join(differ),
            file=sys.stderr,
        )
        return 1
    print(f"feature parity: hadar-cli's {len(wheel)} packages resolve as in the test build")
    return 0


if __name__ == "__main__":
    sys.exit(main())
