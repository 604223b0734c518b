# Sourced by the comparison scripts, from the repository root: $hadar is the
# binary to measure (HADAR, else a fresh release build) and $tmp a scratch
# directory removed on exit; `jct` below measures one run.
if [[ -z "${HADAR:-}" ]]; then
  cargo build --release -q -p hadar-cli
  HADAR=target/release/hadar
fi
hadar=$(realpath "$HADAR")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Hadar's mean JCT in hours of one simulation: simulate's arguments (empty
# if the output has no hadar line).
jct() {
  "$hadar" simulate --no-bound --policy hadar "$@" | awk '/^hadar /{print $4}'
}
