"""A worker start that was late is tried again and the run goes on; a plug-in that cannot be
imported in the workers stops the run, naming it (issue 37).

The demo config as in :mod:`tests.faults.test_hung_tool` (its tool healthy), with the plug-in
:mod:`tests.faults.worker_starts`, whose import misbehaves in the worker processes only (the
trainer imports it as usual):

- ``slow_start``: the fork server's first import takes 6 s, its start deadline is 2 s: the start
  is tried again with 4 s, which the second import (quick) meets;
- ``broken_plugin``: every import in a worker process raises ``ImportError``.
"""

from __future__ import annotations

import pytest

from tests.faults.test_hung_tool import Case, first_iteration, run_cases

pytestmark = [pytest.mark.slow, pytest.mark.serial]

PLUGINS = ("tests.faults.flaky", "tests.faults.worker_starts")
CASES = {
    "slow_start": Case(
        0.0,
        ("agent.run_config.workers.start_timeout=2",),
        {"WORKER_START": "slow", "SLOW_START_S": "6"},
        plugins=PLUGINS,
    ),
    "broken_plugin": Case(0.0, env={"WORKER_START": "broken"}, plugins=PLUGINS),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases(CASES, tmp_path_factory.mktemp("worker_starts"))


def test_a_late_worker_start_is_tried_again_and_the_run_goes_on(outcomes):
    outcome = outcomes["slow_start"]
    assert outcome.done.returncode == 0, outcome.done.stderr[-4000:]
    assert "did not report ready within 2 s); trying again with a 4 s deadline" in (
        outcome.done.stderr
    )
    assert first_iteration(outcome.run)["training/iteration"] == 1


def test_a_plugin_that_cannot_be_imported_in_the_workers_stops_the_run_naming_it(outcomes):
    outcome = outcomes["broken_plugin"]
    err = outcome.done.stderr
    assert outcome.done.returncode != 0
    assert "WorkerStartError" in err and "tests.faults.worker_starts" in err, err[-3000:]
    assert "No module named 'fancy_dependency'" in err
    assert "late or dead starts" not in err  # stopped at once, not tried again
