"""A short smoke run of each benchmark, from this checkout: they start, check their own
results and report. (Their figures are not asserted: speed lives in benchmark/.)"""

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.benchmark

BENCHMARK = Path(__file__).resolve().parent.parent / "benchmark"


@pytest.fixture
def run(migrated_database: str | None) -> Callable[..., dict]:
    """Run a benchmark script, on a migrated database of the test's own on this process's
    server (without one, the script starts an embedded server of its own: seconds each)."""
    database = ["--database-url", migrated_database] if migrated_database else []

    def run(script: str, *args: str, timeout: float = 240, on_database: bool = True) -> dict:
        result = subprocess.run(
            [sys.executable, str(BENCHMARK / script), *args, *(database if on_database else ()), "--json"],
            capture_output=True, text=True, timeout=timeout, cwd=BENCHMARK,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return json.loads(result.stdout)

    return run


def test_math_benchmark_checks_every_result(run):
    report = run("math_benchmark.py", "--jobs", "60", "--workers", "1")
    assert (report["submitted"], report["correct"], report["incorrect"], report["failed_or_timed_out"]) == (60, 60, 0, 0)
    assert set(report["types"]) == {"is_prime", "collatz", "sha256_chain"}
    assert report["throughput_per_s"] > 0 and report["latency_ms"]["p99"] >= report["latency_ms"]["p50"]


def test_client_ceiling_times_both_servers(run):
    report = run("client_ceiling.py", "--jobs", "60", "--rounds", "1", "--workers", "1")
    for server in ("null_server", "jobq"):
        assert report[server]["requests_per_s"] > 0 and report[server]["client_cpu_ms_per_request"] > 0
    assert report["jobq_share_of_null"] > 0


def test_load_benchmark_measures_every_stage(run, tmp_path):
    report = run("load.py", "--jobs", "300", "--concurrency", "8", "--workers", "1", "--client", "python",
                 "--plot-dir", str(tmp_path))
    (single,) = report["runs"]
    assert single["jobs"] == 300 and single["enqueue_per_s"] > 0 and single["end_to_end_per_s"] > 0
    assert single["enqueue_to_done_ms"]["p99"] >= single["enqueue_to_start_ms"]["p50"] > 0
    assert (tmp_path / "latency_distribution_http.png").stat().st_size > 1000


def test_load_benchmark_batch_and_library_modes(run):
    for mode in ("batch", "library"):
        (single,) = run("load.py", "--jobs", "500", "--mode", mode, "--batch", "100", "--workers", "1")["runs"]
        assert single["mode"] == mode and single["jobs"] == 500


def test_scale_benchmark_covers_every_scenario(run, tmp_path):
    report = run("scale.py", "--scale", "0.0005", "--claims", "30", "--drain", "300", "--workers", "1",
                 "--plot", str(tmp_path / "claim.png"))
    assert [s["scenario"] for s in report["scenarios"]] == [
        "empty table", "1 M finished", "5 M finished", "5 M finished + 100 k backlog", "5 M finished + 1 M backlog",
    ]
    assert all(s["claim"]["p50_ms"] > 0 and s["drain"]["jobs_per_s"] > 0 for s in report["scenarios"])
    assert (tmp_path / "claim.png").exists()


def test_drain_and_enqueue_benchmarks(run):
    drain = run("drain.py", "--jobs", "1000", "--workers", "1", "--latency-jobs", "50", "--rate", "50")
    assert drain["drain"]["jobs"] == 1000 and drain["latency"]["p50_ms"] > 0
    several = run("drain.py", "--only", "drain", "--jobs", "600", "--workers", "1", "--queues", "3")
    assert several["drain"]["jobs"] == 600 and several["drain"]["jobs_per_s"] > 0
    enqueue = run("enqueue.py", "--jobs", "2000", "--rounds", "1", "--singles", "200", "--threads", "2")
    assert enqueue["enqueue_many_jobs_per_s"] > 0 and enqueue["ratio"] > 0
    assert enqueue["single_enqueues_per_s_notify_on"] > 0 and enqueue["single_enqueues_per_s_notify_off"] > 0


def test_drain_benchmark_times_a_burst_on_a_database_of_its_own(run):
    burst = run("drain.py", "--only", "burst", "--jobs", "2000", "--workers", "1")["burst"]
    assert burst["jobs"] == 2000 and burst["jobs_per_s"] > 0


def test_outcomes_benchmark_drains_each_way_a_job_can_end(run):
    report = run("outcomes.py", "--jobs", "200", "--workers", "1", "--rounds", "1")
    assert set(report["scenarios"]) == {
        "done", "dead at once", "failed once, then done", "snoozed once, then done", "async def noop",
    }
    assert all(s["median"] > 0 for s in report["scenarios"].values())


def test_profile_drain_puts_every_sample_in_a_part(run):
    report = run("profile_drain.py", "--jobs", "6000", "--claim-batch", "50", "--rate", "1000", "--workers", "1")
    (result,) = report["results"]
    assert result["claim_batch"] == 50 and result["jobs_sampled"] > 0 and result["samples"] > 0
    parts = result["cpu_us_per_job"]
    assert parts and all(part.startswith(("worker: ", "supervisor: ")) for part in parts)
    assert sum(parts.values()) == pytest.approx(result["samples"] / 1000 / result["jobs_sampled"] * 1e6, rel=0.05)


def test_observe_benchmark_times_scrapes_and_inspect(run):
    report = run("observe.py", "--finished", "5000", "--scrapes", "3")
    assert report["rows"] == 5000 + 10000 + 1000
    assert report["metrics_json"]["median_ms"] > 0 and report["metrics_prometheus"]["median_ms"] > 0
    assert report["inspect_command"]["median_ms"] > 0 and report["inspect_snapshot"]["median_ms"] > 0
    pages = report["dashboard"]
    assert "overview" in pages and "jobs" in pages and all(p["median_ms"] > 0 and p["statements"] >= 1 for p in pages.values())


def test_dashdata_benchmark_times_the_rollup_the_series_and_deep_pages(run):
    report = run("dashdata.py", "--finished", "5000", "--per-minute", "300", "--queues", "2", "--rounds", "1")
    assert report["done_in_the_minute"] >= 300
    assert report["take_one_minute"]["median_ms"] > 0 and set(report["series"]) == {
        f"{window} {scope}" for window in ("15m", "1h", "24h") for scope in ("all", "one queue")}
    # jobs_completed_idx, as each partition of finished jobs has it (jobs_finished_..._completed_at_idx)
    assert re.search(r"jobs_finished_\w*completed_at_idx", report["finished_by_minute_plan"])
    assert len(report["pages"]) == 9 and all(figures["median_ms"] > 0 for figures in report["pages"].values())


def test_soak_samples_every_period_and_counts_every_job(run, tmp_path):
    report = run("soak.py", "--minutes", "0.2", "--sample-seconds", "4", "--retention", "5", "--rate", "500",
                 "--partition-interval", "2", "--sample-percent", "100",
                 "--plot", str(tmp_path / "soak.png"))
    assert len(report["samples"]) == 3
    assert all(s["drain_per_s"] > 0 and s["p99_ms"] >= s["p50_ms"] > 0 for s in report["samples"])
    # the histogram the percentiles come from: every job of the period (all pages read), in order
    for s in report["samples"]:
        histogram = s["latency_histogram_ms"]
        assert sum(n for _, n in histogram) >= 500 * 4 * 0.5 and histogram == sorted(histogram)
        assert histogram[0][0] <= s["p50_ms"] <= s["p99_ms"] <= histogram[-1][0]
    # the three samples are both the first five and the last five: one pooled p99
    first, last = report["p99_first_last_ms"]
    assert first == last and min(s["p99_ms"] for s in report["samples"]) <= first <= max(s["p99_ms"] for s in report["samples"])
    assert report["p99_windows_ms"] == [first]  # one window: the three samples
    assert all(s["rss_mb"]["worker_max"] > 0 and s["rss_mb"]["maintenance"] > 0 for s in report["samples"])
    assert report["enqueued_total"] == report["done_total"] == report["producer_sent"] > 0
    assert report["holds"]["nothing lost"] is True
    assert (tmp_path / "soak.png").stat().st_size > 1000


def test_machine_speed_times_one_fixed_loop_again_and_again(run):
    report = run("machine_speed.py", "--every", "0.2", "--minutes", "0.02", on_database=False)
    loops = report["loops"]
    assert len(loops) >= 3 and [loop["t"] for loop in loops] == sorted(loop["t"] for loop in loops)
    # CPU time of the loop itself: positive, and never more than the wall time it took
    assert all(0 < loop["cpu_ms"] <= loop["wall_ms"] + 1 for loop in loops)
    assert report["minutes"] == [{"minute": 1, "cpu_ms": report["minutes"][0]["cpu_ms"]}]
    assert min(loop["cpu_ms"] for loop in loops) <= report["minutes"][0]["cpu_ms"] <= max(loop["cpu_ms"] for loop in loops)


def test_claim_ab_takes_turns_between_two_checkouts(run):
    report = run("claim_ab.py", str(BENCHMARK.parent), "--claims", "200", "--block", "50")
    assert report["claims"] == 200 and report["this_p50_ms"] > 0 and report["other_p50_ms"] > 0
    assert len(report["block_p50_difference_ms"]) == 4


def test_limits_benchmark_drains_each_scenario_under_its_own_limits_only(run):
    report = run("limits.py", "--jobs", "100", "--workers", "2", "--rounds", "2")
    scenarios = report["scenarios"]
    assert scenarios["unlimited"]["limits"] == []  # in every round, not only the first
    assert scenarios["queue limit that never binds"]["limits"] == ["queue default"]
    assert scenarios["100 keys at concurrency 1"]["limits"] == ["rule tenant:*"]
    assert all(len(s["ratios"]) == 2 and s["ratio"] > 0 for s in scenarios.values())


def test_limits_claim_benchmark_times_both_claims_in_each_scenario(run):
    report = run("limits_claim.py", "--jobs", "300", "--size", "5", "--blocks", "1")
    assert set(report["scenarios"]) == {"queue limit that never binds", "100 keys at concurrency 1", "rate that never binds"}
    assert all(s["plain_ms"] > 0 and s["limited_ms"] > 0 for s in report["scenarios"].values())


def test_workflow_cpu_benchmark_finishes_every_step_and_job_in_each_round(run):
    report = run("workflow_cpu.py", "--width", "200", "--batch", "50", "--rounds", "1")
    (round_,) = report["rounds"]
    assert set(round_) == {"root_ms", "middle_and_sink_ms", "independent_ms"}
    assert all(value >= 0 for value in round_.values())


def test_held_benchmark_counts_the_idle_workers_claims_and_times_a_free_keys_job(run):
    report = run("held.py", "--keys", "50", "--behind", "2", "--rate", "50", "--seconds", "1", "--workers", "1")
    assert report["notifications"] >= 40 and report["postgres_cores"] >= 0
    assert report["claims"] >= 1  # the suite's user is a superuser: counted
    assert report["free_key_done_s"] is not None  # done within the script's 30 s
