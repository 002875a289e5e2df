"""One private SLURM cluster (tests/slurm/cluster.py) for the tests in this directory."""

from __future__ import annotations

import pytest

from tests.slurm.cluster import SlurmUnavailable, slurm_cluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """The running cluster, or a skip saying why there is none (e.g. slurmd not installed).

    It declares 4 CPUs and 2 `gpu` GRES (no devices) on any machine, so a job can wait for its
    time-limit signal while other two-task jobs run beside it, and `--gpus-per-node` is accepted.
    """
    try:
        with slurm_cluster(tmp_path_factory.mktemp("slurm"), cpus=4, gpus=2) as running:
            yield running
    except SlurmUnavailable as exc:
        pytest.skip(str(exc))
