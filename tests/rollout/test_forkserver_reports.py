"""The fork server's report of a plug-in that fails to import reaches the pool whole enough to
name it, however long the exception (before, a report over 4096 bytes was cut at the pool's
read and surfaced as an ``UnpicklingError``)."""

from __future__ import annotations

import time

from agentfly.rollout.execution.forkserver import ForkServer


def test_a_long_report_keeps_its_start_and_its_end():
    from agentfly.rollout.execution.forkserver_main import FAILURE_CHARS, failure_report

    text = "ImportError: " + "y" * 30000 + "\nTraceback ends here"
    report = failure_report(text)
    assert len(report) <= FAILURE_CHARS
    assert report.startswith("ImportError: yyy") and report.endswith("Traceback ends here")
    assert "characters left out" in report
    assert failure_report("short") == "short"


def test_a_plugin_whose_import_fails_at_length_is_named():
    server = ForkServer(["tests.rollout.import_fails_long"], [], start_timeout=60.0)
    try:
        deadline = time.monotonic() + 60
        while server.state == "starting":
            assert time.monotonic() < deadline, "the fork server said nothing within 60 s"
            server._receive(0.5)
        assert server.state == "failed"
        assert server.failure.startswith("PluginError: importing plugin module 'tests.rollout.import_fails_long' "
                                         "failed: ImportError: the start of a long import failure")
    finally:
        server.proc.kill()
        server.proc.wait(10)
