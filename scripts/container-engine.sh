#!/usr/bin/env bash
# Starts a Docker-API container engine for Vigil's container runtime tests:
# Podman's Docker-compatible API service on a unix socket.
#
#   eval "$(bash scripts/container-engine.sh)"    # sets DOCKER_HOST
#
# On a Debian machine as root it installs podman and runc with apt-get if they
# are missing, writes /etc/containers/containers.conf and storage.conf when
# they are absent (or were written by this script; other existing files are
# left alone), starts `podman system service` in the background if the socket
# does not answer, and waits until `/_ping` answers. Idempotent: a second run
# finds the service answering and only prints the export line.
#
# stdout carries only `export DOCKER_HOST=unix://SOCKET`; progress goes to stderr.
# Environment:
#   VIGIL_PODMAN_SOCK   socket path (default /run/vigil-podman.sock)
#   VIGIL_PODMAN_LOG    service log (default /run/vigil-podman.log)
#
# Nothing in Vigil depends on Podman: against a real Docker Engine, just set
# DOCKER_HOST (or use /var/run/docker.sock) and skip this script.
set -euo pipefail

sock="${VIGIL_PODMAN_SOCK:-/run/vigil-podman.sock}"
log="${VIGIL_PODMAN_LOG:-/run/vigil-podman.log}"
marker="# written by Vigil's scripts/container-engine.sh"

say() { echo "container-engine: $*" >&2; }
die() { say "$*"; exit 1; }

answers() {
  [ -S "$sock" ] && [ "$(curl -s --max-time 2 --unix-socket "$sock" http://d/_ping 2>/dev/null)" = OK ]
}

done_() {
  echo "export DOCKER_HOST=unix://$sock"
  exit 0
}

need_curl() {
  command -v curl >/dev/null 2>&1 && return 0
  install_packages curl
}

apt_updated=0
install_packages() {
  command -v apt-get >/dev/null 2>&1 || die "missing $*, and no apt-get to install it: install $* by hand"
  [ "$(id -u)" = 0 ] || die "missing $*: run as root (or apt-get install $*)"
  if [ "$apt_updated" = 0 ]; then
    say "apt-get update"
    apt-get update -qq >&2
    apt_updated=1
  fi
  say "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

# Writes $1 from stdin unless it exists and was not written by us.
write_config() {
  local path=$1 content
  content="$marker
$(cat)"
  if [ -e "$path" ] && ! grep -qF "$marker" "$path"; then
    say "keeping existing $path (not ours); if the engine fails, compare it with this script's"
    return 0
  fi
  if [ -e "$path" ] && [ "$(cat "$path")" = "$content" ]; then
    return 0
  fi
  say "writing $path"
  mkdir -p "$(dirname "$path")"
  printf '%s\n' "$content" >"$path"
}

need_curl
answers && done_

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ "${#missing[@]}" -eq 0 ] || install_packages "${missing[@]}"

# The sandboxes this runs in refuse raising RLIMIT_NOFILE/NPROC and have a
# cgroup v1 hybrid layout crun does not support: modest ulimits, runc,
# cgroupfs, vfs storage. Host networking by default: containers serve MCP on
# loopback ports.
write_config /etc/containers/containers.conf <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
netns = "host"
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
EOF
write_config /etc/containers/storage.conf <<'EOF'
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
EOF

# The pid of a live service of ours, found by its command line. Not `$!`:
# `setsid` forks when it is started as a process-group leader (a shell with
# job control on), so the pid it was started as is gone at once.
ours() {
  pgrep -f -- "system service --time=0 unix://$sock\$" | head -n 1
}
ours_alive() {
  [ -n "$(ours)" ]
}

command -v pgrep >/dev/null 2>&1 || install_packages procps

# A service of ours still starting up: wait for it rather than start another.
if ours_alive; then
  say "service (pid $(ours)) is running; waiting for it to answer"
else
  rm -f "$sock"
  mkdir -p "$(dirname "$sock")" "$(dirname "$log")"
  say "starting podman system service on unix://$sock (log: $log)"
  # From /: the service outlives this script, and its containers' monitors
  # (conmon) start in its working directory, which must outlive it too
  # (a deleted checkout makes every start fail "write child: broken pipe").
  (cd / && exec setsid podman system service --time=0 "unix://$sock" </dev/null >>"$log" 2>&1) &
  # Give setsid's fork time to show up (30 s: a busy machine) before the
  # liveness checks below count its absence as an exit.
  for _ in $(seq 1 300); do
    ours_alive && break
    sleep 0.1
  done
fi

for _ in $(seq 1 300); do
  answers && done_
  if ! ours_alive; then
    tail -n 20 "$log" >&2 || true
    die "podman system service exited; see $log"
  fi
  sleep 0.1
done
tail -n 20 "$log" >&2 || true
die "no answer from unix://$sock/_ping after 30 s; see $log"
