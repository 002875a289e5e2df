#!/usr/bin/env bash
# Installs what tests/slurm needs for its private single-host SLURM cluster: Debian's slurmctld,
# slurmd, slurm-client (srun, sbatch, scontrol...) and munge. Idempotent: does nothing when they
# are there. Never fails: without root or apt-get it says so and exits 0, and the SLURM tests
# skip with the reason. About 10 s on a Debian 12 machine (apt-get update ~3 s, install ~7 s).
#
#   bash tests/slurm/install.sh
#
# The packages' own services are not started (policy-rc.d); the tests run their own daemons.
set -uo pipefail

PACKAGES=(slurmctld slurmd slurm-client munge)
COMMANDS=(slurmctld slurmd munged srun sbatch scontrol scancel sinfo squeue)

missing() {
    local name
    for name in "${COMMANDS[@]}"; do
        PATH="$PATH:/usr/sbin:/sbin" command -v "$name" >/dev/null 2>&1 || { echo "$name"; return; }
    done
}

if [ -z "$(missing)" ]; then
    echo "slurm/install.sh: SLURM and munge already installed"
    exit 0
fi
echo "slurm/install.sh: $(missing) not found; installing ${PACKAGES[*]}"

if ! command -v apt-get >/dev/null 2>&1; then
    echo "slurm/install.sh: no apt-get here; the SLURM tests will skip"
    exit 0
fi
SUDO=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        echo "slurm/install.sh: not root and no passwordless sudo; the SLURM tests will skip"
        exit 0
    fi
fi

start=$SECONDS
# Keep the packages' maintainer scripts from starting system munge/slurmd/slurmctld services.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
    "${SUDO[@]}" chmod 755 "$policy"
    trap '"${SUDO[@]}" rm -f "$policy"' EXIT
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get update -qq; then
    echo "slurm/install.sh: apt-get update failed; the SLURM tests will skip"
    exit 0
fi
if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${PACKAGES[@]}" >/dev/null; then
    echo "slurm/install.sh: apt-get install failed; the SLURM tests will skip"
    exit 0
fi
if [ -n "$(missing)" ]; then
    echo "slurm/install.sh: $(missing) still missing after the install; the SLURM tests will skip"
    exit 0
fi
echo "slurm/install.sh: installed ${PACKAGES[*]} in $((SECONDS - start)) s"
