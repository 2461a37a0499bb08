"""`jobq dev`: the whole system from one command, on a fresh data directory."""

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from support.daemon import alive
from support.ports import free_port
from support.waiting import wait_for


pytestmark = pytest.mark.daemon

ROOT = Path(__file__).resolve().parent.parent


def request(port: int, method: str, path: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as response:
        return json.loads(response.read())


def healthy(port: int) -> bool:
    try:
        return request(port, "GET", "/health") == {"status": "ok"}
    except OSError:
        return False


def start_dev(data_dir: Path, port: int, log: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update({"JOBQ_CONCURRENCY": "1", "WEB_CONCURRENCY": "1"})
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "jobq", "dev", "--data-dir", str(data_dir), "--port", str(port), *args],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )


def run_cli_in(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return subprocess.run([sys.executable, "-m", "jobq", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def session_processes(sid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _sid(int(p.name)) == sid]


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except ProcessLookupError:
        return None


def postgres_running(data_dir: Path) -> bool:
    pid_file = data_dir / "pg" / "data" / "postmaster.pid"
    return pid_file.exists() and alive(int(pid_file.read_text().split()[0]))


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)


def test_jobq_dev_runs_everything_and_stops_everything(tmp_path):
    data_dir, port, log = tmp_path / ".jobq", free_port(), tmp_path / "dev.log"
    proc = start_dev(data_dir, port, log)
    try:
        wait_for(lambda: healthy(port), 60, "the API answering /health")
        job = request(port, "POST", "/jobs", {"type": "echo", "payload": {"hello": "world"}})
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard", timeout=10) as page:  # the URL it prints
            assert page.status == 200 and b"<h1>Overview</h1>" in page.read()
        wait_for(lambda: request(port, "GET", f"/jobs/{job['id']}")["status"] == "done", 30, "the job done")
        # A second terminal in the checkout (here tmp_path, a subdirectory of it too): no DATABASE_URL needed.
        (tmp_path / "sub").mkdir()
        inspect = run_cli_in(tmp_path / "sub", "inspect", "--json")
        assert inspect.returncode == 0, inspect.stderr
        assert json.loads(inspect.stdout)["depth"]["done"] >= 1
        assert inspect.stderr.splitlines() == [
            f"jobq: DATABASE_URL is not set: using the embedded PostgreSQL of jobq dev ({(data_dir / 'database_url').read_text().strip()})"
        ]
        wait_for(lambda: "  dashboard    " in log.read_text(), 30, "the banner, printed once the API answers")
        lines = log.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("  dashboard    "))
        assert lines[at] == f"  dashboard    http://127.0.0.1:{port}/dashboard" and lines[at + 1] == ""  # its last line
        assert lines[at - 1].startswith("  DATABASE_URL postgresql://")
        server_pid = int((data_dir / "pg" / "data" / "postmaster.pid").read_text().split()[0])
        children = [pid for pid in session_processes(proc.pid) if pid != proc.pid]
        assert children
    finally:
        stop(proc)
    assert proc.returncode == 0
    wait_for(lambda: not any(alive(pid) for pid in children), 15, "every process jobq dev started gone")
    assert not alive(server_pid) and not postgres_running(data_dir)
    assert not (data_dir / "database_url").exists()  # withdrawn with the server
    assert run_cli_in(tmp_path, "inspect").stderr.startswith("jobq: DATABASE_URL: is not set")
    text = log.read_text()
    assert f"http://127.0.0.1:{port}" in text and "embedded PostgreSQL 16" in text
    assert f"dashboard    http://127.0.0.1:{port}/dashboard" in text

    again = start_dev(data_dir, port, log)
    try:
        wait_for(lambda: healthy(port), 60, "the API after a restart")
        assert request(port, "GET", f"/jobs/{job['id']}")["result"] == {"hello": "world"}  # the data stayed
    finally:
        stop(again)

    fresh = start_dev(data_dir, port, log, "--reset")
    try:
        wait_for(lambda: healthy(port), 60, "the API after --reset")
        assert request(port, "GET", "/jobs")["total"] == 0
    finally:
        stop(fresh)
    assert not postgres_running(data_dir)


def test_jobq_dev_without_a_procfile_says_so(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "jobq", "dev", "--procfile", str(tmp_path / "Procfile"), "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, env={**os.environ, "DATABASE_URL": ""}, timeout=60,
    )
    assert result.returncode == 2  # a configuration error (a flag's value)
    assert result.stderr.strip().startswith("jobq: --procfile:") and "not found" in result.stderr
