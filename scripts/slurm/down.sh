#!/usr/bin/env bash
# Stop the test cluster started by scripts/slurm/up.sh (make slurm-down); --purge also deletes
# its folder ($CACTUS_SLURM_DIR, default /tmp/cactus-bench-slurm: state, logs, database).
set -uo pipefail

DIR=${CACTUS_SLURM_DIR:-/tmp/cactus-bench-slurm}
export SLURM_CONF="$DIR/slurm.conf"

stop() {  # stop NAME: SIGTERM the daemon in run/NAME.pid, wait up to 20 s, then SIGKILL
  local pidfile="$DIR/run/$1.pid" pid
  [[ -f "$pidfile" ]] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null
    for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    echo "slurm-down: stopped $1 ($pid)"
  fi
  rm -f "$pidfile"
}

if [[ -f "$SLURM_CONF" ]] && command -v scancel >/dev/null 2>&1; then
  scancel --user="$(id -un)" >/dev/null 2>&1 || true  # jobs first, so no step is orphaned
fi
for daemon in slurmd slurmctld slurmdbd mariadbd munged; do
  stop "$daemon"
done
if [[ "${1:-}" == "--purge" ]]; then
  rm -rf "$DIR"
  echo "slurm-down: removed $DIR"
fi
