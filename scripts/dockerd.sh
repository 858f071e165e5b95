#!/usr/bin/env bash
# Start, stop or query the private dockerd the eval suite uses.
#
#   scripts/dockerd.sh start    # idempotent; prints DOCKER_HOST=unix:///run/n8n-eval-docker.sock
#   scripts/dockerd.sh stop     # stops only the dockerd this script started (by its pidfile)
#   scripts/dockerd.sh status   # running/stopped, storage driver; exit 0 when running
#
# It runs Debian's dockerd (apt-get install docker.io) with its own data root, exec root, pidfile,
# socket and containerd namespace, so it never touches a dockerd someone else runs. There is no
# default bridge (--bridge=none, no iptables): containers use host networking only.
# The storage driver is overlay2; if dockerd cannot start with it, vfs is used instead (slower,
# bigger). Override with N8N_EVAL_DOCKER_STORAGE_DRIVER=overlay2|vfs.
#
# Environment knobs (all optional):
#   N8N_EVAL_DOCKER_DATA_ROOT  default /var/lib/n8n-eval-docker
#   N8N_EVAL_DOCKER_EXEC_ROOT  default /run/n8n-eval-docker
#   N8N_EVAL_DOCKER_PIDFILE    default /run/n8n-eval-docker.pid
#   N8N_EVAL_DOCKER_SOCK       default /run/n8n-eval-docker.sock
#   N8N_EVAL_DOCKER_LOG        default /var/log/n8n-eval-dockerd.log
#   N8N_EVAL_DOCKER_WAIT_S     seconds to wait for the socket, default 60
set -euo pipefail

DATA_ROOT="${N8N_EVAL_DOCKER_DATA_ROOT:-/var/lib/n8n-eval-docker}"
EXEC_ROOT="${N8N_EVAL_DOCKER_EXEC_ROOT:-/run/n8n-eval-docker}"
PIDFILE="${N8N_EVAL_DOCKER_PIDFILE:-/run/n8n-eval-docker.pid}"
SOCK="${N8N_EVAL_DOCKER_SOCK:-/run/n8n-eval-docker.sock}"
LOG="${N8N_EVAL_DOCKER_LOG:-/var/log/n8n-eval-dockerd.log}"
WAIT_S="${N8N_EVAL_DOCKER_WAIT_S:-60}"
DOCKER_HOST_URL="unix://${SOCK}"
DRIVER_FILE="${DATA_ROOT}.storage-driver"

die() { echo "dockerd.sh: $*" >&2; exit 1; }

our_pid() {
  # The pid in our pidfile, if that process is alive and is a dockerd.
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/$pid/comm" && "$(cat "/proc/$pid/comm")" == "dockerd" ]] || return 1
  echo "$pid"
}

answers() {
  DOCKER_HOST="$DOCKER_HOST_URL" docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

driver_in_use() {
  DOCKER_HOST="$DOCKER_HOST_URL" docker info --format '{{.Driver}}' 2>/dev/null || true
}

launch() {
  # launch DRIVER: start dockerd in the background and wait for its socket. 0 when it answers.
  local driver="$1"
  mkdir -p "$DATA_ROOT" "$EXEC_ROOT" "$(dirname "$LOG")"
  {
    echo "=== $(date -u +%FT%TZ) starting dockerd with storage driver $driver"
  } >>"$LOG"
  # setsid: dockerd outlives the shell (and the CI step) that started it.
  setsid dockerd \
    --data-root "$DATA_ROOT" \
    --exec-root "$EXEC_ROOT" \
    --pidfile "$PIDFILE" \
    --host "$DOCKER_HOST_URL" \
    --containerd-namespace n8n-eval \
    --containerd-plugins-namespace n8n-eval-plugins \
    --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    --storage-driver "$driver" \
    >>"$LOG" 2>&1 </dev/null &
  local launched=$!
  local deadline=$((SECONDS + WAIT_S))
  while (( SECONDS < deadline )); do
    if answers; then
      echo "$driver" >"$DRIVER_FILE"
      return 0
    fi
    if ! kill -0 "$launched" 2>/dev/null; then
      return 1  # dockerd exited: wrong driver or a real error (see the log)
    fi
    sleep 0.5
  done
  kill "$launched" 2>/dev/null || true
  return 1
}

start() {
  command -v dockerd >/dev/null || die "dockerd not found: apt-get install -y docker.io"
  command -v docker >/dev/null || die "docker CLI not found: apt-get install -y docker.io"
  if pid="$(our_pid)"; then
    if answers; then
      echo "DOCKER_HOST=${DOCKER_HOST_URL}"
      return 0
    fi
    die "dockerd (pid $pid, pidfile $PIDFILE) runs but $SOCK does not answer; see $LOG or run '$0 stop'"
  fi
  if [[ -S "$SOCK" ]] && answers; then
    die "$SOCK answers but is not ours (no live pid in $PIDFILE): refusing to touch it"
  fi
  rm -f "$PIDFILE" "$SOCK"
  local drivers
  if [[ -n "${N8N_EVAL_DOCKER_STORAGE_DRIVER:-}" ]]; then
    drivers=("$N8N_EVAL_DOCKER_STORAGE_DRIVER")
  elif [[ -f "$DRIVER_FILE" ]]; then
    drivers=("$(cat "$DRIVER_FILE")")  # a data root only works with the driver that filled it
  else
    drivers=(overlay2 vfs)
  fi
  local d
  for d in "${drivers[@]}"; do
    if launch "$d"; then
      echo "dockerd.sh: dockerd running (storage driver $(driver_in_use), log $LOG)" >&2
      echo "DOCKER_HOST=${DOCKER_HOST_URL}"
      return 0
    fi
    echo "dockerd.sh: dockerd did not start with storage driver $d (see $LOG)" >&2
    rm -f "$PIDFILE" "$SOCK"
  done
  echo "--- last lines of $LOG:" >&2
  tail -n 20 "$LOG" >&2 || true
  die "dockerd did not start"
}

stop() {
  local pid
  if ! pid="$(our_pid)"; then
    echo "dockerd.sh: not running (no live dockerd in $PIDFILE)" >&2
    rm -f "$PIDFILE"
    return 0
  fi
  kill -TERM "$pid"
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null && (( SECONDS < deadline )); do sleep 0.5; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "dockerd.sh: dockerd $pid did not stop in 30 s; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE" "$SOCK"
  echo "dockerd.sh: stopped dockerd $pid" >&2
}

status() {
  if pid="$(our_pid)" && answers; then
    echo "running pid=$pid driver=$(driver_in_use) DOCKER_HOST=${DOCKER_HOST_URL}"
    return 0
  fi
  echo "stopped"
  return 3
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
