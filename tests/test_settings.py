import pytest

from jobq.errors import ConfigError
from jobq.settings import DEFAULT_POLL_INTERVAL, Settings

pytestmark = pytest.mark.unit


def test_defaults_apply_when_nothing_is_set():
    settings = Settings.from_env({})
    assert settings.poll_interval == DEFAULT_POLL_INTERVAL
    assert settings.queues == ("default",)
    assert settings.database_url is None
    assert settings.concurrency >= 1


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
        ("JOBQ_QUEUES", ","),
        ("JOBQ_LOG_FORMAT", "xml"),
        ("JOBQ_MAX_PENDING", "-1"),
        ("JOBQ_BACKOFF_JITTER", "2"),
        ("JOBQ_ADVISORY_NAMESPACE", "70000"),
        ("PORT", "http"),
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


def test_missing_database_url_is_a_config_error():
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({}).require_database_url()
    assert caught.value.variable == "DATABASE_URL"


def test_overrides_win_over_the_environment():
    assert Settings.from_env({"JOBQ_POLL_INTERVAL": "3"}, poll_interval=0.5).poll_interval == 0.5
