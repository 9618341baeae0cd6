#!/usr/bin/env bash
# Start a single-node Slurm cluster on this machine for tests (make slurm-up); stop: down.sh.
#
#   scripts/slurm/up.sh && source "${CACTUS_SLURM_DIR:-/tmp/cactus-bench-slurm}/env.sh"
#   python run.py -m hydra/launcher=slurm +local_slurm=... (see README, "A real Slurm")
#
# Needs Debian's slurm-wlm and munge (apt-get install slurm-wlm munge); with slurmdbd and
# mariadb-server installed too, job accounting runs, so `sacct` works (submitit follows jobs with
# it: without it a cancelled job is never seen as finished). No systemd: munged, mariadbd,
# slurmdbd, slurmctld and slurmd run as daemons with all state under $CACTUS_SLURM_DIR, on ports
# $CACTUS_SLURM_PORT..+3 (default 16817..16820). The node is `localhost` with this machine's real
# CPU count and memory (`slurmd -C`). Exit status: 0 up, 3 binaries missing, 1 failed to start.
set -euo pipefail

DIR=${CACTUS_SLURM_DIR:-/tmp/cactus-bench-slurm}
PORT=${CACTUS_SLURM_PORT:-16817}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export SLURM_CONF="$DIR/slurm.conf"

for binary in munged slurmctld slurmd sbatch scontrol; do
  if ! command -v "$binary" >/dev/null 2>&1; then
    echo "slurm-up: $binary not found; install Slurm first: apt-get install -y slurm-wlm munge" >&2
    exit 3
  fi
done

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() {  # wait_for SECONDS WHAT COMMAND...
  local seconds=$1 what=$2; shift 2
  for _ in $(seq "$((seconds * 2))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "slurm-up: $what did not come up in ${seconds}s; logs in $DIR/log:" >&2
  tail -n 5 "$DIR"/log/*.log >&2 || true
  exit 1
}

if alive "$DIR/run/slurmctld.pid" && alive "$DIR/run/slurmd.pid" && scontrol ping >/dev/null 2>&1; then
  echo "slurm-up: already running; export SLURM_CONF=$SLURM_CONF"
  exit 0
fi
"$HERE/down.sh" >/dev/null 2>&1 || true  # leftovers of a half-started cluster
mkdir -p "$DIR"/{munge,ctld,slurmd,run,log,db}
chmod 755 "$DIR/munge"  # clients need to reach the socket; the key itself is 0400

# munge: a private key and socket (munged insists on strict permissions; --force accepts /tmp).
if [[ ! -s "$DIR/munge/munge.key" ]]; then
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$DIR/munge/munge.key"
fi
munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
  --seed-file="$DIR/munge/munged.seed"
wait_for 10 munged test -S "$DIR/munge/munge.socket"

# Accounting: MariaDB + slurmdbd when both are installed.
ACCOUNTING="AccountingStorageType=accounting_storage/none"
MARIADBD=$(command -v mariadbd || command -v mysqld || true)
if command -v slurmdbd >/dev/null 2>&1 && [[ -n "$MARIADBD" ]]; then
  if [[ ! -d "$DIR/db/mysql" ]]; then
    mariadb-install-db --datadir="$DIR/db" --user="$(id -un)" --auth-root-authentication-method=socket \
      >"$DIR/log/mariadb-install.log" 2>&1
  fi
  "$MARIADBD" --datadir="$DIR/db" --user="$(id -un)" --bind-address=127.0.0.1 --port="$((PORT + 3))" \
    --socket="$DIR/run/mysqld.sock" --pid-file="$DIR/run/mariadbd.pid" \
    --log-error="$DIR/log/mariadb.log" --skip-name-resolve >/dev/null 2>&1 &
  wait_for 30 mariadb mariadb --socket="$DIR/run/mysqld.sock" -u root -e "SELECT 1"
  mariadb --socket="$DIR/run/mysqld.sock" -u root -e "
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'cactus-bench';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
  sed -e "s|@DIR@|$DIR|g" -e "s|@USER@|$(id -un)|g" -e "s|@DBD_PORT@|$((PORT + 2))|g" \
    -e "s|@DB_PORT@|$((PORT + 3))|g" "$HERE/slurmdbd.conf.in" >"$DIR/slurmdbd.conf"
  chmod 600 "$DIR/slurmdbd.conf"  # slurmdbd refuses a config others can read (it has a password)
  ACCOUNTING="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$((PORT + 2))
AccountingStoragePass=$DIR/munge/munge.socket"  # the munge socket for slurmdbd connections
else
  echo "slurm-up: no slurmdbd/mariadb-server: running without accounting (sacct will not work;" \
    "apt-get install -y slurmdbd mariadb-server to have it)" >&2
fi

# slurm.conf: this machine's real CPUs and memory, as slurmd itself reports them.
read -r CPUS MEMORY_MB < <(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*RealMemory=\([0-9]*\).*/\1 \2/p')
{
  sed -e "s|@DIR@|$DIR|g" -e "s|@USER@|$(id -un)|g" -e "s|@CTLD_HOST@|$(hostname -s)|g" \
    -e "s|@CTLD_PORT@|$PORT|g" -e "s|@SLURMD_PORT@|$((PORT + 1))|g" -e "s|@CPUS@|$CPUS|g" \
    -e "s|@MEMORY_MB@|$MEMORY_MB|g" -e "/@ACCOUNTING@/d" "$HERE/slurm.conf.in"
  echo "$ACCOUNTING"
} >"$DIR/slurm.conf"
echo "export SLURM_CONF=$SLURM_CONF" >"$DIR/env.sh"

if [[ "$ACCOUNTING" == *slurmdbd* ]]; then
  slurmdbd
  wait_for 30 slurmdbd sacctmgr -n list cluster
  sacctmgr -i add cluster cactus >/dev/null 2>&1 || true
fi
slurmctld
wait_for 30 slurmctld scontrol ping
slurmd -N localhost
node_idle() { [[ "$(sinfo -h -n localhost -o %T)" == idle* ]]; }
wait_for 60 "slurmd (node localhost idle)" node_idle
echo "slurm-up: cluster up (localhost: $CPUS CPUs, $MEMORY_MB MB; ${ACCOUNTING%%$'\n'*})"
echo "slurm-up: export SLURM_CONF=$SLURM_CONF   (or: source $DIR/env.sh)"
