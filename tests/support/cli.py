"""The command line as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m jobq *args`` with only ``env`` set (and coverage's own variables, if it runs)."""
    bare = {"PATH": "/usr/bin:/bin", **{k: v for k, v in os.environ.items() if k.startswith("COVERAGE_")}}
    return subprocess.run([sys.executable, "-m", "jobq", *args], env={**bare, **env}, capture_output=True, text=True)
