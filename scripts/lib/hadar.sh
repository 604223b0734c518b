# Sourced by the comparison scripts, from the repository root: $hadar is the
# binary to measure (HADAR, else a fresh release build) and $tmp a scratch
# directory removed on exit.
if [[ -z "${HADAR:-}" ]]; then
  cargo build --release -q -p hadar-cli
  HADAR=target/release/hadar
fi
hadar=$(realpath "$HADAR")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
