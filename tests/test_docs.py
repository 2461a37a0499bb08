"""The documentation site (docs/, mkdocs.yml): it builds with ``--strict`` (a broken
link, anchor or reference fails), its configuration table is the one the settings
code writes, and its examples run: every Python and shell block not titled
"Illustrative: <why>" (tests/support/snippets.py)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from support import db, snippets
from support.daemon import Daemon
from support.web_server import WebServer

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[1]
PYTHON_PAGES = snippets.runnable("python")
SHELL_PAGES = snippets.runnable("sh")
# What a shell block finds: `curl` that fails on an HTTP error (a 4xx the page did not
# expect is a failed example), the API where the page says it is, and sleeps of at most
# 5 s (the daemon's backoff is 0.1 s, not 5 s: a wait the page gives for retries is over
# well before).
SHELL_PRELUDE = """
set -euo pipefail
curl() {{ local args=(); for a in "$@"; do args+=("${{a//localhost:8000/127.0.0.1:{port}}}"); done
         command curl --fail-with-body -sS "${{args[@]}}"; echo; }}
sleep() {{ command sleep "$(( $1 < 5 ? $1 : 5 ))"; }}
"""


def test_the_site_builds_strict_with_its_reference_and_openapi_document(tmp_path):
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr
    assert (site / "index.html").exists()
    reference = (site / "reference" / "python" / "index.html").read_text()
    assert 'id="jobq.enqueue_many"' in reference and "All or nothing" in reference  # from its docstring
    document = json.loads((site / "openapi.json").read_text())
    assert "/jobs" in document["paths"] and document["openapi"].startswith("3.")


def test_a_broken_link_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# A page\n\nSee [the other page](other.md#nowhere).\n")
    (docs / "other.md").write_text("# Other\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((ROOT / "mkdocs.yml").read_text().split("\nhooks:")[0] + "\n")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)],
                           cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert built.returncode != 0 and "does not contain an anchor '#nowhere'" in built.stderr


def test_the_configuration_table_is_the_one_the_settings_code_writes():
    check = subprocess.run([sys.executable, str(ROOT / "tools" / "settings_table.py"), "--check"],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    page = (ROOT / "docs" / "configuration.md").read_text()
    for variable in ("DATABASE_URL", "JOBQ_CLAIM_BATCH", "JOBQ_DASHBOARD_HIDE_PAYLOADS"):
        assert f"| `{variable}` |" in page


def test_every_runnable_block_is_python_or_sh_and_illustrative_ones_say_why():
    every = [b for page in snippets.PAGES for b in snippets.blocks(page)]
    assert len([b for b in every if b.lang in snippets.RUNNABLE and not b.illustrative]) >= 14
    for block in every:
        if block.illustrative:
            assert len(block.title) > len("Illustrative: ") + 5, f"{block.where}: say why it is not run"


@pytest.mark.db
@pytest.mark.parametrize("page", sorted(PYTHON_PAGES))
def test_the_python_examples_of(page, conn, database_url, tmp_path):
    blocks = [(b.where, b.code) for b in PYTHON_PAGES[page]]
    ran = subprocess.run([sys.executable, "-c", snippets.PYTHON_SESSION], input=json.dumps(blocks),
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={**os.environ, "DATABASE_URL": database_url})
    assert ran.returncode == 0, ran.stderr


@pytest.fixture(scope="module")
def system(server_url, database_url, request, tmp_path_factory):  # database_url: the template exists
    """A whole system as `make run` starts it, on a database of its own fresh from the
    migrated template (its job ids start at 1, as on a new install): Gunicorn and a
    supervisor serving the queues the pages use, with the built-in handlers."""
    from conftest import RUN

    name = db.database_name(request.config.stash[RUN], "docs")
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(db.database_name(request.config.stash[RUN], "template"))))
    url = db.on(server_url, name)
    workdir = tmp_path_factory.mktemp("docs-system")
    (workdir / ".venv").symlink_to(sys.prefix)  # the pages say .venv/bin/jobq
    web = WebServer(url, workdir).start()
    daemon = Daemon(url, workdir / "daemon.log", 2, JOBQ_QUEUES="default,mail,reports").start()
    try:
        yield url, web.port, workdir
    finally:
        daemon.stop()
        web.stop()
        db.drop(server_url, name)


@pytest.mark.db
@pytest.mark.parametrize("page", sorted(SHELL_PAGES))
def test_the_shell_examples_of(page, system):
    url, port, workdir = system
    for block in SHELL_PAGES[page]:
        script = SHELL_PRELUDE.format(port=port) + block.code
        ran = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=workdir, timeout=120,
                             env={**os.environ, "DATABASE_URL": url,
                                  "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                                  # A page's own pytest run keeps to the work directory: without a
                                  # basetemp, pytest takes group and other access away from the
                                  # shared /tmp/pytest-of-<user>, and an embedded server starting
                                  # meanwhile (its own user) could no longer reach its data
                                  # ("initdb ... pg_control: Permission denied", once in CI).
                                  "PYTEST_ADDOPTS": f"--basetemp={workdir / 'pytest-of-the-page'}"})
        assert ran.returncode == 0, f"{block.where}:\n{shlex.quote(block.code)}\n{ran.stdout}\n{ran.stderr}"
