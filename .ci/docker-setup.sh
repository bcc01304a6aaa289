#!/usr/bin/env bash
# Install and start a local Docker engine (plus debootstrap and bubblewrap) for the tests.
# Idempotent: a second run only checks that `docker info` answers.
# Mirrors swe_residual.backends.docker.bootstrap.ensure_docker_daemon.
set -euo pipefail

LOG=/var/log/dockerd.log
PIDFILE=/var/run/docker.pid
CONTAINERD_PIDFILE=/var/run/docker/containerd/containerd.pid
WAIT_SECONDS=${DOCKER_SETUP_TIMEOUT:-60}

if [ "$(id -u)" -ne 0 ]; then
    echo "docker-setup: must run as root" >&2
    exit 1
fi

# 1. Packages (skip apt entirely when all are present).
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "docker-setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${missing[@]}"
fi

# 2. Engine.
if docker info >/dev/null 2>&1; then
    echo "docker-setup: docker engine already running"
    exit 0
fi

pid_is() { # pid_is PIDFILE COMM -> success if PIDFILE names a live process called COMM
    local pid
    pid=$(cat "$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] \
        && ! grep -q '^[^)]*) [ZX]' "/proc/$pid/stat" 2>/dev/null
}

if pid_is "$PIDFILE" dockerd; then
    dockerd_pid=$(cat "$PIDFILE")
    echo "docker-setup: dockerd (pid $dockerd_pid) running but not answering yet; waiting"
else
    rm -f "$PIDFILE"
    pid_is "$CONTAINERD_PIDFILE" containerd || rm -f "$CONTAINERD_PIDFILE"
    mkdir -p "$(dirname "$LOG")"
    echo "=== .ci/docker-setup.sh: starting dockerd at $(date) ===" >>"$LOG"
    log_start=$(wc -l <"$LOG")
    # Own session, stdin closed: dockerd survives this script and the CI step.
    setsid dockerd >>"$LOG" 2>&1 </dev/null &
    dockerd_pid=$!
    echo "docker-setup: started dockerd (pid $dockerd_pid), log $LOG"
fi

for _ in $(seq 1 $((WAIT_SECONDS * 2))); do
    if docker info >/dev/null 2>&1; then
        echo "docker-setup: docker engine ready ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
        exit 0
    fi
    if ! kill -0 "$dockerd_pid" 2>/dev/null && ! pid_is "$PIDFILE" dockerd; then
        echo "docker-setup: dockerd exited early" >&2
        break
    fi
    sleep 0.5
done

echo "docker-setup: docker engine did not answer within ${WAIT_SECONDS}s; tail of $LOG:" >&2
tail -n +"$(( ${log_start:-0} + 1 ))" "$LOG" | tail -n 40 >&2 || true
exit 1
