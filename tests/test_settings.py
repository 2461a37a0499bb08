import socket
import threading

import pytest

import jobq.settings
from jobq.errors import ConfigError
from jobq.store import keepalive
from jobq.settings import DEFAULT_DEAD_CONNECTION_TIMEOUT, DEFAULT_POLL_INTERVAL, Settings

pytestmark = pytest.mark.unit


def test_defaults_apply_when_nothing_is_set():
    settings = Settings.from_env({})
    assert settings.poll_interval == DEFAULT_POLL_INTERVAL
    assert settings.queues == ("default",)
    assert settings.database_url is None
    assert settings.concurrency >= 1
    assert settings.hostname == socket.gethostname()


def test_a_supervisor_can_name_its_host():
    assert Settings.from_env({"JOBQ_HOSTNAME": "web-2.eu"}).hostname == "web-2.eu"


def test_lists_are_comma_separated_and_trimmed():
    settings = Settings.from_env({"JOBQ_QUEUES": " a, b,,c ", "JOBQ_HANDLERS": "app.jobs,app.more"})
    assert settings.queues == ("a", "b", "c")
    assert settings.handlers == ("app.jobs", "app.more")


def test_platform_variables_have_no_prefix():
    settings = Settings.from_env({"DATABASE_URL": "postgresql://x/y", "PORT": "9000"})
    assert settings.database_url == "postgresql://x/y"
    assert settings.port == 9000


def test_empty_value_means_unset():
    assert Settings.from_env({"JOBQ_MAX_PENDING": ""}).max_pending is None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("JOBQ_POLL_INTERVAL", "soon"),
        ("JOBQ_POLL_INTERVAL", "0"),
        ("JOBQ_POLL_INTERVAL", "inf"),
        ("JOBQ_CONCURRENCY", "1.5"),
        ("JOBQ_CONCURRENCY", "0"),
        ("JOBQ_MIN_WORKERS", "0"),
        ("JOBQ_QUEUES", ","),
        ("JOBQ_LOG_FORMAT", "xml"),
        ("JOBQ_MAX_PENDING", "-1"),
        ("JOBQ_BACKOFF_JITTER", "2"),
        ("JOBQ_ADVISORY_NAMESPACE", "70000"),
        ("PORT", "http"),
        ("JOBQ_DEAD_CONNECTION_TIMEOUT", "-1"),
        ("JOBQ_DEAD_CONNECTION_TIMEOUT", "0.5"),
        ("JOBQ_DEAD_CONNECTION_TIMEOUT", "never"),
        ("JOBQ_HOSTNAME", "two words"),
        ("JOBQ_HOSTNAME", "h" * 256),
    ],
)
def test_bad_value_names_its_variable(variable, value):
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({variable: value})
    assert caught.value.variable == variable
    assert str(caught.value).startswith(variable)


def test_stale_threshold_must_exceed_heartbeat_interval():
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"JOBQ_HEARTBEAT_INTERVAL": "10", "JOBQ_STALE_THRESHOLD": "10"})
    assert caught.value.variable == "JOBQ_STALE_THRESHOLD"


def test_retention_keeps_a_bounded_number_of_partitions():
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"JOBQ_RETENTION": "604800", "JOBQ_PARTITION_INTERVAL": "60"})  # 10,080 partitions
    assert caught.value.variable == "JOBQ_PARTITION_INTERVAL" and "604.8 s" in str(caught.value)
    assert Settings.from_env({"JOBQ_RETENTION": "604800", "JOBQ_PARTITION_INTERVAL": "3600"}).partition_interval == 3600


def test_a_vanished_peer_is_dropped_within_30_s_by_default_on_both_sides():
    timeout = Settings.from_env({}).dead_connection_timeout
    assert timeout == DEFAULT_DEAD_CONNECTION_TIMEOUT == 30
    parameters = keepalive.dead_connection_parameters("postgresql://db.example/app", timeout)
    options = parameters.pop("options")
    # client: first probe after 10 s idle, then every 5 s; unacknowledged data for 30 s
    assert parameters == {
        "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3, "tcp_user_timeout": 30000,
    }
    # server: the same rule for the session, over 30 s + the cancel grace (10 s) + the margin (5 s);
    # a running statement checks its client every 5 s
    assert keepalive.server_dead_connection_timeout(timeout) == 45
    parameters = keepalive.dead_connection_parameters("postgresql://db.example/app", timeout, 45)
    assert parameters["options"].split() == [
        "-c", "tcp_keepalives_idle=15", "-c", "tcp_keepalives_interval=7", "-c", "tcp_keepalives_count=3",
        "-c", "tcp_user_timeout=45000", "-c", "client_connection_check_interval=5000",
    ]
    # without a server timeout given, both sides get the same
    assert options.split()[1] == "tcp_keepalives_idle=10"


def test_a_zero_dead_connection_timeout_sets_nothing():
    assert Settings.from_env({"JOBQ_DEAD_CONNECTION_TIMEOUT": "0"}).dead_connection_timeout == 0
    assert keepalive.dead_connection_parameters("postgresql://db.example/app", 0) == {}


def test_what_the_url_sets_wins_and_its_options_come_last(monkeypatch):
    monkeypatch.setenv("PGOPTIONS", "-c from_the_environment=1")
    url = "host=db.example keepalives_idle=60 options='-c search_path=app'"
    parameters = keepalive.dead_connection_parameters(url, 6)
    assert "keepalives_idle" not in parameters and parameters["keepalives_interval"] == 1
    assert parameters["options"].startswith("-c tcp_keepalives_idle=2 ")
    assert parameters["options"].endswith(" -c search_path=app")
    assert keepalive.dead_connection_parameters("host=db.example", 6)["options"].endswith(" -c from_the_environment=1")


def test_missing_database_url_is_a_config_error():
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({}).require_database_url()
    assert caught.value.variable == "DATABASE_URL"


def test_overrides_win_over_the_environment():
    assert Settings.from_env({"JOBQ_POLL_INTERVAL": "3"}, poll_interval=0.5).poll_interval == 0.5


@pytest.fixture
def fresh_read():
    """current() reads the (monkeypatched) environment at its next call, and the
    settings read in the test do not outlive it."""
    jobq.settings.reset()
    yield
    jobq.settings.reset()


def test_current_reads_the_environment_once_until_reset(fresh_read, monkeypatch):
    monkeypatch.setenv("JOBQ_POLL_INTERVAL", "3")
    first = jobq.settings.current()
    monkeypatch.setenv("JOBQ_POLL_INTERVAL", "4")
    assert jobq.settings.current() is first
    assert first.poll_interval == 3
    jobq.settings.reset()
    assert jobq.settings.current().poll_interval == 4


def test_current_reads_once_when_threads_ask_together(fresh_read, monkeypatch):
    reads = []
    from_env = Settings.from_env

    def counted() -> Settings:
        reads.append(threading.get_ident())
        return from_env()

    monkeypatch.setattr(Settings, "from_env", counted)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(jobq.settings.current())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(reads) == 1
    assert len(answers) == 8 and all(answer is answers[0] for answer in answers)


def test_current_keeps_nothing_after_a_bad_value(fresh_read, monkeypatch):
    monkeypatch.setenv("JOBQ_POLL_INTERVAL", "soon")
    with pytest.raises(ConfigError) as caught:
        jobq.settings.current()
    assert caught.value.variable == "JOBQ_POLL_INTERVAL"
    monkeypatch.setenv("JOBQ_POLL_INTERVAL", "2")
    assert jobq.settings.current().poll_interval == 2


def test_adopted_settings_are_what_current_returns(fresh_read, monkeypatch):
    monkeypatch.setenv("JOBQ_POLL_INTERVAL", "7")
    chosen = jobq.settings.adopt(Settings.from_env(concurrency=3))  # a command's flags over the environment
    monkeypatch.setenv("JOBQ_POLL_INTERVAL", "9")
    assert jobq.settings.current() is chosen
    assert (chosen.concurrency, chosen.poll_interval) == (3, 7)
