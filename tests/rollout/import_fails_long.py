"""A plug-in whose import fails with a report longer than one socket read used to take (4096
bytes): for tests/rollout/test_forkserver_reports.py."""

raise ImportError("the start of a long import failure " + "x" * 20000 + " the end of it")
