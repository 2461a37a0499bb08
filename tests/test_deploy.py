"""What can be checked of the deployment files without a Docker engine or Heroku:
they parse, they run the Procfile's commands, they copy files that exist, and the
configuration they document is the configuration jobq reads."""

import json
import runpy
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import jobq.settings
from jobq.settings import Settings, variable_name

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def procfile() -> dict[str, list[str]]:
    lines = (ROOT / "Procfile").read_text().splitlines()
    return {name: shlex.split(command) for name, _, command in (line.partition(":") for line in lines if line.strip())}


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_procfile_has_release_web_and_worker():
    assert procfile() == {
        "release": ["jobq", "migrate"],
        "web": ["gunicorn", "-c", "deploy/gunicorn.conf.py", "web.app:create_app()"],
        "worker": ["jobq", "worker"],
    }


def test_compose_services_run_the_procfile_commands():
    services = compose()["services"]
    commands = procfile()
    assert services["migrate"]["command"] == commands["release"]
    assert services["web"]["command"] == commands["web"]
    assert services["worker"]["command"] == commands["worker"]


def test_compose_waits_for_healthy_services_and_lets_workers_scale():
    services = compose()["services"]
    assert services["postgres"]["image"] == "postgres:16-alpine"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["web"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["worker"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "/health" in " ".join(services["web"]["healthcheck"]["test"])
    # --scale worker=3 needs no fixed name or published port on the worker
    assert "container_name" not in services["worker"] and "ports" not in services["worker"]
    grace = float(services["worker"]["stop_grace_period"].rstrip("s"))
    assert grace > Settings.from_env({}).graceful_timeout


def test_dockerfile_copies_paths_that_exist_and_runs_as_a_user():
    lines = [line.split() for line in (DEPLOY / "Dockerfile").read_text().splitlines() if line.strip()]
    assert lines[[l[0] for l in lines].index("FROM")][1] == "python:3.12-slim"
    copied = [source for line in lines if line[0] == "COPY" for source in line[1:-1]]
    assert copied and all((ROOT / source).exists() for source in copied), copied
    users = [line[1] for line in lines if line[0] == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any(line[0] == "HEALTHCHECK" for line in lines)


def test_app_json_declares_postgres_the_formation_and_every_setting():
    app = json.loads((ROOT / "app.json").read_text())
    assert app["addons"][0]["plan"] == "heroku-postgresql"
    assert set(app["formation"]) == {"web", "worker"}
    platform = {"database_url", "port"}  # set by Heroku itself
    expected = {variable_name(field) for field in Settings.model_fields if field not in platform}
    assert expected <= set(app["env"])
    assert all(entry["description"] for entry in app["env"].values())


def test_the_configuration_page_documents_every_setting_with_its_variable_name():
    page = (ROOT / "docs" / "configuration.md").read_text()
    for field in Settings.model_fields:
        assert f"| `{variable_name(field)}` |" in page, variable_name(field)


def test_systemd_units_run_the_supervisor_and_gunicorn():
    worker = (DEPLOY / "jobq-worker.service").read_text()
    web = (DEPLOY / "jobq-web.service").read_text()
    assert "ExecStart=/opt/jobq/.venv/bin/jobq worker" in worker and "KillMode=mixed" in worker
    assert "deploy/gunicorn.conf.py" in web


@pytest.fixture
def gunicorn_conf(monkeypatch):
    """deploy/gunicorn.conf.py as Gunicorn loads it, in a process whose settings are read
    afresh (and forgotten after the test)."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://nobody@/unused")
    monkeypatch.setenv("JOBQ_MAX_BODY_BYTES", "4096")
    jobq.settings.reset()
    yield runpy.run_path(str(DEPLOY / "gunicorn.conf.py"))
    jobq.settings.reset()


def test_gunicorn_conf_and_the_preloaded_app_share_one_read_of_the_settings(gunicorn_conf):
    from web.app import create_app

    app = create_app()  # what Gunicorn's preload builds, in the process that loaded the conf
    assert app.extensions["jobq"].settings is gunicorn_conf["settings"]
    assert app.config["MAX_CONTENT_LENGTH"] == 4096


def test_gunicorn_env_option_may_not_set_a_jobq_variable(gunicorn_conf):
    refuse = gunicorn_conf["refuse_jobq_variables_from_gunicorn_env"]
    with pytest.raises(RuntimeError, match="^JOBQ_API_TOKEN: "):
        refuse(SimpleNamespace(env={"JOBQ_API_TOKEN": "secret", "OTHER": "1"}, env_orig={}))
    refuse(SimpleNamespace(env={"OTHER": "1"}, env_orig={}))
    refuse(SimpleNamespace(env={"JOBQ_API_TOKEN": "secret"}, env_orig={"JOBQ_API_TOKEN": "secret"}))
