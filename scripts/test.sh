#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine: installs what the tests
# need, builds once, then tests, lints and checks formatting.
#
#   scripts/test.sh            # everything
#   scripts/test.sh --quick    # tests only (no clippy/fmt)
#
# Needs: a Rust toolchain (cargo, with clippy and rustfmt). Run as root on a
# fresh Debian machine, it installs the system packages the tests use.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
[ "${1:-}" = "--quick" ] && quick=1

# Each step says when it starts and how long the one before it took, so that
# a CI log shows where the time goes (docs/performance.md, "CI").
t0=$(date +%s)
last=$t0
step() {
  local now
  now=$(date +%s)
  [ "$now" -gt "$t0" ] && printf '    (%d s; %d s since the start)\n' $((now - last)) $((now - t0))
  last=$now
  printf '\n==> %s\n' "$*"
}

# System packages the build or tests need: a C compiler, OpenSSL and zlib
# headers for ssh2 (libssh2 is built from source), and the tools the SSH test
# hosts use (scripts/ssh-hosts.sh installs openssh-server itself,
# scripts/slurm-cluster.sh slurm-wlm and munge).
need=()
command -v cc >/dev/null || need+=(gcc)
command -v pkg-config >/dev/null || need+=(pkg-config)
dpkg -s libssl-dev >/dev/null 2>&1 || need+=(libssl-dev)
dpkg -s zlib1g-dev >/dev/null 2>&1 || need+=(zlib1g-dev)
command -v ip >/dev/null || need+=(iproute2)
command -v setsid >/dev/null || need+=(util-linux)
command -v nsenter >/dev/null || need+=(util-linux)
# Docker test daemons (scripts/docker-hosts.sh): dockerd and the docker CLI,
# busybox-static for the test image's root filesystem, openssl for the TLS
# daemon's certificates.
[ -x /usr/sbin/dockerd ] || need+=(docker.io)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v openssl >/dev/null || need+=(openssl)
# The live view's page is loaded in a real headless browser (cli/tests/commands/live.rs).
command -v chromium >/dev/null || need+=(chromium)
# /metrics is checked by Prometheus' own linter (promtool, in Debian's
# prometheus package; its server is never started, see below).
command -v promtool >/dev/null || need+=(prometheus)
# The Python package's tests need a virtual environment (pyenv's Python has
# venv; Debian's needs python3-venv).
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  step "installing ${need[*]}"
  if [ "$(id -u)" = 0 ]; then
    # No package's service starts as it installs (prometheus' would listen on
    # every address): the tests start the daemons they need themselves.
    added_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      added_policy=1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
    [ "$added_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  else
    echo "missing ${need[*]}: install them (apt-get install ${need[*]}) or run as root" >&2
    exit 1
  fi
fi

step "build (once; tests reuse it)"
cargo test --workspace --locked --no-run

# Clippy compiles everything once more, in check mode, which no other step
# can reuse. It runs beside the tests, at the lowest priority and in a target
# directory of its own (a running `cargo test` holds target/'s lock): it takes
# the CPU the tests leave idle while they wait on processes, services and
# timeouts, and the tests keep theirs. Its verdict is read at the end.
clippy_pid=
if [ "$quick" = 0 ]; then
  step "clippy, started beside the tests (target/clippy, its output in target/clippy.log)"
  # (A session of its own: a failing run stops it with its compilers.)
  setsid nice -n 19 cargo clippy --workspace --all-targets --locked --target-dir target/clippy \
    -- -D warnings >target/clippy.log 2>&1 &
  clippy_pid=$!
fi

# What the test hosts started is stopped at the end, also on a failure.
started=()
stop_test_hosts() {
  if [ -n "${clippy_pid:-}" ] && kill -0 "$clippy_pid" 2>/dev/null; then
    kill -- "-$clippy_pid" 2>/dev/null || true
  fi
  for s in "${started[@]}"; do "$s" down >/dev/null 2>&1 || true; done
}
trap stop_test_hosts EXIT

step "SSH test hosts (network namespaces with sshd; scripts/ssh-hosts.sh)"
if [ "$(id -u)" = 0 ]; then
  started+=(scripts/ssh-hosts.sh)
  scripts/ssh-hosts.sh up
else
  echo "not root: the SSH backend tests will fail (run as root, or start the hosts with sudo scripts/ssh-hosts.sh up)" >&2
fi

step "Docker test daemons (local dockerd and two in network namespaces; scripts/docker-hosts.sh)"
if [ "$(id -u)" = 0 ]; then
  started+=(scripts/docker-hosts.sh)
  HADAR_TRAINER=target/debug/hadar-trainer scripts/docker-hosts.sh up
else
  echo "not root: the Docker backend tests will fail (run as root, or start the daemons with sudo scripts/docker-hosts.sh up)" >&2
fi

step "Slurm test cluster (munged, slurmctld, 3 slurmd with fake GPUs; scripts/slurm-cluster.sh)"
if [ "$(id -u)" = 0 ]; then
  started+=(scripts/slurm-cluster.sh)
  scripts/slurm-cluster.sh up
else
  echo "not root: the Slurm backend tests will fail (run as root, or start the cluster with sudo scripts/slurm-cluster.sh up)" >&2
fi

step "tests"
cargo test --workspace --locked

step "Python package (python/): pytest against the hadar built above, ruff, mypy"
venv=target/python-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r python/requirements-test.txt
# numpy is installed, so its tests must run; torch is not (3 GB of CUDA wheels from
# PyPI): its tests are reported as not run (python/tests/conftest.py).
(cd python && HADAR_BIN="$OLDPWD/target/debug/hadar" "$OLDPWD/$venv/bin/python" -m pytest -q \
  --require-extra numpy)
(cd python && "$OLDPWD/$venv/bin/ruff" check . ../examples/python \
  && "$OLDPWD/$venv/bin/ruff" format --check . ../examples/python && "$OLDPWD/$venv/bin/mypy")

step "the wheel (maturin: hadar beside hadar_job), installed in a fresh venv"
# In the test build's profile, tagged linux_x86_64 as it is (a wheel for PyPI is
# built with --release --strip and repaired to manylinux, see README.md). hadar-cli
# turns on itself the features the test build's dev-dependencies turn on
# (cli/Cargo.toml, checked by scripts/feature_parity.py), so maturin reuses every
# dependency compiled above instead of compiling them again with other features.
rm -rf target/wheels target/wheel-check
(cd python && PATH="$OLDPWD/$venv/bin:$PATH" maturin build --profile dev --compatibility linux \
  --locked --out "$OLDPWD/target/wheels")
python3 -m venv target/wheel-check
target/wheel-check/bin/pip install -q --disable-pip-version-check target/wheels/hadar_job-*.whl
target/wheel-check/bin/hadar --version
target/wheel-check/bin/hadar simulate --no-bound --json >/dev/null
target/wheel-check/bin/python -c 'import hadar_job; print("hadar_job", hadar_job.__version__)'

if [ "$quick" = 0 ]; then
  step "clippy (its result; it ran beside the tests)"
  if ! wait "$clippy_pid"; then
    cat target/clippy.log
    echo "clippy found problems (above)" >&2
    exit 1
  fi
  grep -v '^ *Compiling\|^ *Checking' target/clippy.log || true
  step "rustfmt"
  cargo fmt --all -- --check
  step "feature parity: the wheel's build reuses the test build's dependencies"
  python3 scripts/feature_parity.py
  step "code shape: no circle among core's modules, no production function over 80 lines"
  scripts/code-shape.sh
fi
step "all checks passed"
