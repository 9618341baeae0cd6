#!/usr/bin/env bash
# Install what the single-node test Slurm needs (make slurm-install; .ci/run calls it): Debian's
# slurm-wlm and munge, plus slurmdbd and mariadb-server for job accounting (submitit follows jobs
# with sacct). Debian/Ubuntu only; root or sudo. Does nothing when all are installed.
# Exit status: 0 installed, 3 cannot install here (no apt-get, or neither root nor sudo).
set -euo pipefail

PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "slurm-install: ${PACKAGES[*]} already installed"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "slurm-install: no apt-get here; install ${missing[*]} with this system's packages" >&2
  exit 3
fi
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "slurm-install: needs root or sudo to apt-get install ${missing[*]}" >&2
    exit 3
  fi
  SUDO=(sudo)
fi
echo "slurm-install: apt-get install ${missing[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
echo "slurm-install: done ($(slurmctld -V))"
