#!/usr/bin/env bash
# Installs the system programs agentfly and its tests use, from Debian's packages (`make install`
# and `make test` run it):
#   - bubblewrap (bwrap): the code sandbox's isolation; without it the code tool and code_reward
#     refuse to run unless the run opts in to isolation=unsafe_rlimits_only
#     (agentfly/rollout/execution/sandbox_isolation.py, tests/rollout/test_sandbox_escape.py);
#   - slurmctld, slurmd, slurm-client (srun, sbatch, scontrol...) and munge: the private
#     single-host SLURM cluster of tests/slurm;
#   - openjdk-17-jre-headless (java): ScienceWorld's simulator (agentfly/envs/scienceworld.py);
#   - stockfish: the chess puzzles' engine (agentfly/envs/chess.py; Debian puts it in /usr/games).
# Idempotent: installs only what is missing. Never fails: without root (or passwordless sudo) or
# apt-get it says so and exits 0; the tests that need the missing programs skip with the reason,
# and a run with the code tool is refused, saying how to install bubblewrap. About 10 s on a
# Debian 12 machine (apt-get update ~3 s, install ~7 s), more with the Java runtime.
#
#   bash scripts/install_system_packages.sh
#
# The packages' own services are not started (policy-rc.d); the SLURM tests run their own daemons.
set -uo pipefail

# "package: the commands it provides" (a package is installed when any of its commands is missing)
PACKAGE_COMMANDS=(
    "bubblewrap: bwrap"
    "slurmctld: slurmctld"
    "slurmd: slurmd"
    "slurm-client: srun sbatch scontrol scancel sinfo squeue"
    "munge: munged"
    "openjdk-17-jre-headless: java"
    "stockfish: stockfish"
)

missing_packages() {
    local group package commands name
    for group in "${PACKAGE_COMMANDS[@]}"; do
        package=${group%%:*}
        commands=${group#*:}
        for name in $commands; do
            if ! PATH="$PATH:/usr/sbin:/sbin:/usr/games" command -v "$name" >/dev/null 2>&1; then
                echo "$package"
                break
            fi
        done
    done
}

say() { echo "install_system_packages.sh: $*"; }

read -r -a MISSING <<<"$(missing_packages | tr '\n' ' ')"
if [ "${#MISSING[@]}" -eq 0 ]; then
    say "bubblewrap, SLURM, munge, Java and Stockfish already installed"
    exit 0
fi
say "installing ${MISSING[*]}"

if ! command -v apt-get >/dev/null 2>&1; then
    say "no apt-get here; the tests that need ${MISSING[*]} will skip"
    exit 0
fi
SUDO=()
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        say "not root and no passwordless sudo; the tests that need ${MISSING[*]} will skip"
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
    say "apt-get update failed; the tests that need ${MISSING[*]} will skip"
    exit 0
fi
if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "${MISSING[@]}" >/dev/null; then
    say "apt-get install failed; the tests that need ${MISSING[*]} will skip"
    exit 0
fi
read -r -a STILL <<<"$(missing_packages | tr '\n' ' ')"
if [ "${#STILL[@]}" -gt 0 ]; then
    say "${STILL[*]} still missing after the install; the tests that need them will skip"
    exit 0
fi
say "installed ${MISSING[*]} in $((SECONDS - start)) s"
