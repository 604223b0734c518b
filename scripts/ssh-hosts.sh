#!/usr/bin/env bash
# Test hosts for the SSH backend: key-only sshd in network namespaces on this
# machine, each with its own address, hostname and host key, plus one on
# 127.0.0.1:2222. Everything lives in $HADAR_SSH_DIR; nothing in /etc/ssh or
# ~/.ssh is touched. Traffic stays on this machine (a private bridge).
#
#   scripts/ssh-hosts.sh up      # idempotent; installs openssh-server if needed
#   scripts/ssh-hosts.sh down    # stops the daemons, removes the namespaces
#
# Hosts: h1 10.78.0.11, h2 10.78.0.12, h3 10.78.0.13 (HADAR_SSH_HOSTS), local
# 127.0.0.1:2222. Client: ssh -F $HADAR_SSH_DIR/ssh_config h1 hostname
set -euo pipefail
HOSTS=${HADAR_SSH_HOSTS:-"h1:10.78.0.11 h2:10.78.0.12 h3:10.78.0.13"}
DIR=${HADAR_SSH_DIR:-/var/lib/hadar-test-ssh}
LOCAL_PORT=2222
BR=br-hadar
BR_IP=10.78.0.1/24
cmd=${1:-up}
[ "$(id -u)" = 0 ] || { echo "ssh-hosts.sh: run as root (it makes network namespaces)" >&2; exit 1; }

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() {
  local end=$(($(date +%s) + $1)); shift
  until "$@" >/dev/null 2>&1; do [ "$(date +%s)" -ge "$end" ] && return 1; sleep 0.05; done
}

down() {
  for f in "$DIR"/sshd_*.pid; do
    [ -e "$f" ] || continue
    p=$(cat "$f"); kill "$p" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    rm -f "$f"
  done
  for spec in $HOSTS; do
    name=${spec%%:*}
    # Tasks started over SSH live in the namespace too; a namespace with
    # processes left in it would outlive its name (and keep its address).
    ip netns pids "hadar-$name" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns delete "hadar-$name" 2>/dev/null || true
    ip link delete "veth-hd-$name" 2>/dev/null || true
  done
  ip link delete "$BR" 2>/dev/null || true
  if command -v iptables >/dev/null; then
    iptables -D FORWARD -i "$BR" -o "$BR" -j ACCEPT 2>/dev/null || true
  fi
  for spec in $HOSTS; do rm -rf "/etc/netns/hadar-${spec%%:*}"; done
}

start_sshd() { # NAME ADDR PORT [NETNS]
  local name=$1 addr=$2 port=$3 ns=${4:-}
  local cfg=$DIR/sshd_$name.conf key=$DIR/host_$name
  [ -s "$key" ] || ssh-keygen -q -t ed25519 -N '' -C "host-$name" -f "$key"
  cat > "$cfg" <<CFG
ListenAddress $addr:$port
HostKey $key
PidFile $DIR/sshd_$name.pid
AuthorizedKeysFile $DIR/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
MaxStartups 200:30:400
MaxSessions 100
Subsystem sftp internal-sftp
CFG
  if alive "$DIR/sshd_$name.pid"; then return; fi
  /usr/sbin/sshd -t -f "$cfg"
  if [ -n "$ns" ]; then
    ip netns exec "$ns" unshare --uts sh -c "hostname $name && exec /usr/sbin/sshd -f $cfg -E $DIR/sshd_$name.log"
  else
    /usr/sbin/sshd -f "$cfg" -E "$DIR/sshd_$name.log"
  fi
  wait_for 10 test -s "$DIR/sshd_$name.pid"
}

up() {
  if ! [ -x /usr/sbin/sshd ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client iproute2 util-linux >/dev/null
  fi
  install -d -m 0700 "$DIR"
  install -d -m 0755 /run/sshd
  [ -s "$DIR/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C hadar-test -f "$DIR/id_ed25519"
  cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"; chmod 0600 "$DIR/authorized_keys"
  : > "$DIR/known_hosts"
  printf 'Host *\n  User root\n  IdentityFile %s/id_ed25519\n  IdentitiesOnly yes\n  UserKnownHostsFile %s/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 5\n' "$DIR" "$DIR" > "$DIR/ssh_config"
  start_sshd local 127.0.0.1 "$LOCAL_PORT"
  echo "[127.0.0.1]:$LOCAL_PORT $(cut -d' ' -f1,2 "$DIR/host_local.pub")" >> "$DIR/known_hosts"
  printf 'Host local\n  HostName 127.0.0.1\n  Port %s\n' "$LOCAL_PORT" >> "$DIR/ssh_config"
  ip link show "$BR" >/dev/null 2>&1 || { ip link add "$BR" type bridge; ip addr add "$BR_IP" dev "$BR"; }
  ip link set "$BR" up
  # Ranks of one task talk host to host over the bridge. A dockerd with
  # iptables on (scripts/docker-hosts.sh's local one) sets the FORWARD
  # policy to DROP, which silently drops that traffic: accept it.
  if command -v iptables >/dev/null; then
    iptables -C FORWARD -i "$BR" -o "$BR" -j ACCEPT 2>/dev/null \
      || iptables -I FORWARD -i "$BR" -o "$BR" -j ACCEPT
  fi
  # No DNS server is reachable from a namespace: every lookup of a name
  # not in /etc/hosts would wait 10-20 s (PyTorch's gloo looks up its own
  # hostname). Each namespace gets a hosts file naming every host, and a
  # resolv.conf that fails at once; `ip netns exec` mounts them over /etc
  # for sshd and so for every task it starts.
  for spec in $HOSTS; do
    IFS=: read -r name _ <<<"$spec"
    install -d "/etc/netns/hadar-$name"
    { echo "127.0.0.1 localhost"
      for other in $HOSTS; do IFS=: read -r n a <<<"$other"; echo "$a $n"; done
    } > "/etc/netns/hadar-$name/hosts"
    echo "options timeout:1 attempts:1" > "/etc/netns/hadar-$name/resolv.conf"
  done
  for spec in $HOSTS; do
    IFS=: read -r name ip <<<"$spec"
    ns=hadar-$name
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns"
      ip link delete "veth-hd-$name" 2>/dev/null || true   # left over from a namespace deleted by hand
      ip link add "veth-hd-$name" type veth peer name eth0 netns "$ns"
      ip link set "veth-hd-$name" master "$BR" up
      ip -n "$ns" addr add "$ip/24" dev eth0
      ip -n "$ns" link set lo up
      ip -n "$ns" link set eth0 up
    fi
    start_sshd "$name" "$ip" 22 "$ns"
    echo "$ip $(cut -d' ' -f1,2 "$DIR/host_$name.pub")" >> "$DIR/known_hosts"
    printf 'Host %s\n  HostName %s\n' "$name" "$ip" >> "$DIR/ssh_config"
  done
  echo "ssh test hosts up in $DIR: local $(for s in $HOSTS; do printf '%s ' "${s%%:*}"; done)"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  *) echo "usage: ssh-hosts.sh up|down" >&2; exit 2 ;;
esac
