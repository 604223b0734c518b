#!/usr/bin/env bash
# Test daemons for the Docker backend: one dockerd on this machine's
# unix:///var/run/docker.sock, and one in each of two network namespaces
# (hadar-d1 10.79.0.11, hadar-d2 10.79.0.12 on bridge br-hadar-d) listening on
# plain TCP port 2375 (test only: no TLS). Each daemon has its own data-root,
# exec-root and pid file under $HADAR_DOCKER_DIR / /run/hadar-test-docker, and
# is stopped by pid. No registry is needed: the test image is imported from a
# root filesystem assembled here (busybox-static plus the example trainer and
# the shared libraries it needs).
#
#   scripts/docker-hosts.sh up      # idempotent; needs docker.io, busybox-static
#   scripts/docker-hosts.sh down    # stops the daemons, removes the namespaces
#
# Also a TLS-only daemon "tls" in hadar-d1 on tcp://10.79.0.11:2376 (CA, server and
# client certificates made with openssl in $HADAR_DOCKER_DIR/certs: ca.pem, cert.pem,
# key.pem are the client's).
# The image: hadar-test/trainer:latest, /usr/local/bin/hadar-trainer inside,
# taken from $HADAR_TRAINER (default target/debug/hadar-trainer; build it first).
# It is re-imported when the trainer changes (label hadar.trainer.sha256).
# Installs nothing: scripts/test.sh installs docker.io and busybox-static.
#
# Pitfalls (found on Debian 12, docker.io 20.10): `ip netns exec` remounts
# /sys and hides the cgroup mounts, so a daemon in a namespace is started
# with `nsenter --net=/run/netns/X`; a TCP listener without --tls=false
# sleeps 15 s at start-up; dockerd leaves nsfs mounts under its exec-root.
set -euo pipefail
cd "$(dirname "$0")/.."
HOSTS=${HADAR_DOCKER_HOSTS:-"d1:10.79.0.11 d2:10.79.0.12"}
DIR=${HADAR_DOCKER_DIR:-/var/lib/hadar-test-docker}
RUN=/run/hadar-test-docker
BR=br-hadar-d
BR_IP=10.79.0.1/24
IMAGE=${HADAR_DOCKER_IMAGE:-hadar-test/trainer:latest}
TRAINER=${HADAR_TRAINER:-target/debug/hadar-trainer}
cmd=${1:-up}
[ "$(id -u)" = 0 ] || { echo "docker-hosts.sh: run as root (it starts dockerd and makes network namespaces)" >&2; exit 1; }

# A process that runs (a zombie does not count: where this machine's init does
# not reap, a killed dockerd stays one).
running() { [ -r "/proc/$1/stat" ] && ! awk '{exit ($3 == "Z") ? 0 : 1}' "/proc/$1/stat" 2>/dev/null; }
alive() { [ -s "$1" ] && running "$(cat "$1")"; }
wait_for() {
  local end=$(($(date +%s) + $1)); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.1; done
}

stop_pid() { # PIDFILE
  local f=$1 p
  [ -s "$f" ] || { rm -f "$f"; return 0; }
  p=$(cat "$f")
  kill "$p" 2>/dev/null || true   # dockerd stops its containers' shims and its containerd
  for _ in $(seq 1 150); do running "$p" || break; sleep 0.1; done
  running "$p" && kill -9 "$p" 2>/dev/null
  rm -f "$f"
}

down() {
  for f in "$RUN"/*.pid; do
    [ -e "$f" ] || continue
    stop_pid "$f"
  done
  # dockerd leaves nsfs and overlay mounts under its roots behind.
  awk -v r="$RUN/" -v d="$DIR/" 'index($2, r) == 1 || index($2, d) == 1 {print $2}' /proc/mounts \
    | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for spec in $HOSTS; do
    name=${spec%%:*}
    ip netns pids "hadar-$name" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns delete "hadar-$name" 2>/dev/null || true
    ip link delete "veth-hdd-$name" 2>/dev/null || true
  done
  ip link delete "$BR" 2>/dev/null || true
  # The rule `up` added (see forward_on_bridge).
  if command -v iptables >/dev/null; then
    while iptables -D FORWARD -i "$BR" -o "$BR" -j ACCEPT 2>/dev/null; do :; done
  fi
  rm -f "$DIR/endpoints"
  echo "docker test daemons stopped"
}

# The test image's root filesystem: busybox applets, the trainer and its libraries.
rootfs() {
  local out=$1 r
  r=$(mktemp -d)
  mkdir -p "$r"/{bin,tmp,proc,sys,dev,etc,usr/local/bin}
  cp /bin/busybox "$r/bin/busybox"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "$r/bin/$a"; done
  cp "$TRAINER" "$r/usr/local/bin/hadar-trainer"
  # Shared libraries the trainer links (and the dynamic loader), same paths.
  for lib in $(ldd "$TRAINER" | grep -o '/[^ ]*'); do
    mkdir -p "$r$(dirname "$lib")"; cp -L "$lib" "$r$lib"
  done
  chmod 1777 "$r/tmp"
  tar -C "$r" -cf "$out" .
  rm -rf "$r"
}

# A CA, a server certificate for IP $1 and a client certificate, in $DIR/certs
# (the TLS daemon's and Hadar's, as in Docker's "Protect the daemon socket").
certs() {
  local ip=$1 t=$DIR/certs
  [ -s "$t/cert.pem" ] && [ "$(cat "$t/ip" 2>/dev/null)" = "$ip" ] && return 0
  rm -rf "$t"; install -d -m 0700 "$t"
  (
    cd "$t"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=hadar-test-ca \
      -keyout ca-key.pem -out ca.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=hadar-d-tls -keyout server-key.pem \
      -out server.csr 2>/dev/null
    printf 'subjectAltName = IP:%s\nextendedKeyUsage = serverAuth\n' "$ip" > server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile server.ext -out server-cert.pem 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=hadar -keyout key.pem -out client.csr 2>/dev/null
    printf 'extendedKeyUsage = clientAuth\n' > client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 \
      -extfile client.ext -out cert.pem 2>/dev/null
    rm -f ./*.csr ./*.ext
    echo "$ip" > ip
  )
}

# Lets traffic between the namespaces cross the bridge (a gang's ranks on d1
# and d2). A dockerd with iptables on (any on this machine, e.g. the system's)
# sets `iptables -P FORWARD DROP` and loads br_netfilter, after which bridged
# traffic goes through FORWARD and is dropped without a word; the policy stays
# after that dockerd stops. Idempotent; `down` removes the rule.
forward_on_bridge() {
  command -v iptables >/dev/null || return 0
  iptables -C FORWARD -i "$BR" -o "$BR" -j ACCEPT 2>/dev/null \
    || iptables -I FORWARD -i "$BR" -o "$BR" -j ACCEPT
}

start_dockerd() { # NAME URI [NETNS] [tls]
  local name=$1 uri=$2 ns=${3:-} tls=${4:-}
  local cli=(-H "$uri")
  [ -n "$tls" ] && cli+=(--tlsverify --tlscacert "$DIR/certs/ca.pem" --tlscert "$DIR/certs/cert.pem" --tlskey "$DIR/certs/key.pem")
  local pid=$RUN/$name.pid
  if [ -z "$ns" ] && ! alive "$pid" && docker -H "$uri" version >/dev/null 2>&1; then
    # A daemon this script did not start (the system's docker.service) already
    # serves the socket: use it, and leave it running at `down`.
    echo "docker-hosts.sh: using the daemon already on $uri" >&2
  elif ! alive "$pid"; then
    rm -f "$pid"
    local args=(--data-root "$DIR/$name" --exec-root "$RUN/$name" --pidfile "$pid" -H "$uri"
                --bridge=none --iptables=false --ip-masq=false --ip6tables=false)
    if [ -n "$tls" ]; then
      args+=(--tlsverify --tlscacert "$DIR/certs/ca.pem" --tlscert "$DIR/certs/server-cert.pem" --tlskey "$DIR/certs/server-key.pem")
    elif [ -n "$ns" ]; then
      args+=(--tls=false)
    fi
    if [ -n "$ns" ]; then
      setsid nsenter --net="/run/netns/$ns" /usr/sbin/dockerd "${args[@]}" \
        > "$DIR/$name.log" 2>&1 < /dev/null &
    else
      setsid /usr/sbin/dockerd "${args[@]}" > "$DIR/$name.log" 2>&1 < /dev/null &
    fi
  fi
  wait_for 60 docker "${cli[@]}" version || { echo "dockerd $name did not start:" >&2; tail -5 "$DIR/$name.log" >&2; exit 1; }
  local have
  have=$(docker "${cli[@]}" image inspect -f '{{index .Config.Labels "hadar.trainer.sha256"}}' "$IMAGE" 2>/dev/null || true)
  if [ "$have" != "$SHA" ]; then
    docker "${cli[@]}" import --change "LABEL hadar.trainer.sha256=$SHA" "$DIR/rootfs.tar" "$IMAGE" >/dev/null
  fi
  # Exited containers that earlier test runs left (their tests never close).
  docker "${cli[@]}" container prune -f --filter label=hadar.run >/dev/null
  echo "$name $uri" >> "$DIR/endpoints"
}

up() {
  for tool in /usr/sbin/dockerd /bin/busybox; do
    [ -x "$tool" ] || { echo "docker-hosts.sh: $tool is missing (apt-get install docker.io busybox-static)" >&2; exit 1; }
  done
  [ -x "$TRAINER" ] || { echo "docker-hosts.sh: $TRAINER is missing (cargo build -p hadar-example-trainer)" >&2; exit 1; }
  install -d -m 0711 "$DIR" "$RUN"
  SHA=$(sha256sum "$TRAINER" | cut -d' ' -f1)
  if [ ! -s "$DIR/rootfs.tar" ] || [ "$(cat "$DIR/rootfs.sha256" 2>/dev/null)" != "$SHA" ]; then
    rootfs "$DIR/rootfs.tar"; echo "$SHA" > "$DIR/rootfs.sha256"
  fi
  : > "$DIR/endpoints"
  ip link show "$BR" >/dev/null 2>&1 || { ip link add "$BR" type bridge; ip addr add "$BR_IP" dev "$BR"; }
  ip link set "$BR" up
  start_dockerd local unix:///var/run/docker.sock
  # After the local daemon: a system dockerd started just now sets the policy.
  forward_on_bridge
  for spec in $HOSTS; do
    IFS=: read -r name ip <<<"$spec"
    ns=hadar-$name
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns"
      ip link delete "veth-hdd-$name" 2>/dev/null || true
      ip link add "veth-hdd-$name" type veth peer name eth0 netns "$ns"
      ip link set "veth-hdd-$name" master "$BR" up
      ip -n "$ns" addr add "$ip/24" dev eth0
      ip -n "$ns" link set lo up
      ip -n "$ns" link set eth0 up
    fi
    start_dockerd "$name" "tcp://$ip:2375" "$ns"
  done
  # One more daemon, TLS only (client certificates), in the first namespace on port 2376.
  IFS=: read -r name ip <<<"${HOSTS%% *}"
  certs "$ip"
  start_dockerd tls "tcp://$ip:2376" "hadar-$name" tls
  echo "docker test daemons up: $(tr '\n' ' ' < "$DIR/endpoints")(image $IMAGE)"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  *) echo "usage: docker-hosts.sh up|down" >&2; exit 2 ;;
esac
