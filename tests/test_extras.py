"""The integrations are extras: ``import jobq`` imports none of them (nor what they
need), and the core install requires none of their packages."""

from __future__ import annotations

import configparser
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

EXTRA_MODULES = ("django", "django_tasks", "sqlalchemy", "greenlet", "testcontainers", "pgserver", "pytest",
                 "jobq.aio", "jobq.contrib.django", "jobq.testing", "pytest_jobq")


def test_import_jobq_imports_no_integration_nor_its_packages():
    probe = f"import sys, json, jobq; print(json.dumps([m for m in {list(EXTRA_MODULES)!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd="/")
    assert json.loads(done.stdout) == []


def test_the_core_install_requires_none_of_the_extras_packages():
    config = configparser.ConfigParser()
    config.read(Path(__file__).parent.parent / "setup.cfg")
    required = config["options"]["install_requires"].lower()
    for package in ("django", "sqlalchemy", "greenlet", "testcontainers", "pgserver", "pytest"):
        assert package not in required
