"""Package-level properties: light imports and a working console entry point."""

from __future__ import annotations

import subprocess
import sys


def test_pure_parts_import_without_heavy_dependencies():
    code = (
        "import sys, agentfly.estimators, agentfly.modules.losses, agentfly.registry;"
        "heavy = [m for m in ('ray', 'vllm', 'lightning', 'transformers', 'wandb') if m in sys.modules];"
        "print(heavy); sys.exit(1 if heavy else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_console_entry_point_reports_version():
    out = subprocess.run([sys.executable, "-m", "agentfly.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and "agentfly" in out.stdout
