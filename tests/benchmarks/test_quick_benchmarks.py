"""The benchmarks in their reduced form (``benchmarks/run_all.py --quick``), so CI keeps
every script running and its summary readable; the figures themselves are not checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import MATRIX_LINE
from tests.env import child_env

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = ("cache_ops", "scan_full_load", "lookup_batch_pg", "cache_memory", "join_throughput",
            "naive_vs_lookup", "point_in_time")
# Ratios every quick run must produce (others depend on optional scripts).
HEADLINE = (
    "join_full_cache_vs_mapInPandas",
    "join_partial_100pct_vs_mapInPandas",
    "broadcast_join_vs_join_full_cache",
    "lookup_join_pg_warm_vs_naive_udf_pg",
    "lookup_join_pg_cold_vs_naive_udf_pg",
    "lookup_join_redis_warm_vs_naive_udf_redis",
    "lookup_join_redis_cold_vs_naive_udf_redis",
    "default_cache_get_vs_ttlcache_get",
    "scan_read_arrow_p4_vs_select_star",
    "lookup_batch_100pct_hits_vs_query_per_key",
    "cache_arrow_bytes_per_row",
    "cache_bytes_vs_arrow",
    "arrow_bytes_per_row",
    "snapshot_bytes_per_row",
    "join_partial_90pct_vs_mapInPandas",
    "point_in_time_full_as_of_vs_plain",
    "point_in_time_partial_as_of_vs_plain",
    "delta_history_reload_reads_only_its_commit",
)


LINE_SCRIPTS = ("join_throughput",)
"""What the test matrix's 3.5 line runs (tests/conftest.py: MATRIX_LINE; the 4.x lines
run the join tests only): the join against a mapInPandas pass-through, the ratios that
depend on the Spark line."""
LINE_HEADLINE = ("join_full_cache_vs_mapInPandas", "join_partial_100pct_vs_mapInPandas",
                 "join_partial_90pct_vs_mapInPandas")


@pytest.mark.skipif(not MATRIX_LINE, reason="the matrix's other lines only")
@pytest.mark.timeout(600)
def test_quick_join_benchmark_on_this_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--quick", "--only", ",".join(LINE_SCRIPTS),
         "--out", str(tmp_path)],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=540, check=False,
    )
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-4000:])
    summary = json.loads((tmp_path / "summary.json").read_text())
    for name in LINE_SCRIPTS:
        assert summary["benchmarks"][name]["status"] == "ok", summary["benchmarks"][name]
    missing = [key for key in LINE_HEADLINE if summary["headline"].get(key) is None]
    assert not missing, missing


@pytest.mark.skipif(MATRIX_LINE, reason="on the matrix's other lines: the join benchmark only")
@pytest.mark.timeout(900)
def test_quick_benchmarks_run_and_summarize(postgres_dsn: str, redis_url: str,
                                            tmp_path: Path) -> None:
    env = child_env(POSTGRES_DSN=postgres_dsn, REDIS_URL=redis_url)
    done = subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--quick", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=840, check=False,
    )
    assert done.returncode == 0, (done.stdout[-4000:], done.stderr[-4000:])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {"quick", "command", "seconds", "machine", "load_average", "headline", "plot",
            "benchmarks"} <= summary.keys()
    assert summary["quick"] is True
    for name in REQUIRED:
        entry = summary["benchmarks"][name]
        assert entry["status"] == "ok", (name, entry.get("status"))
        assert entry["result"], name
    for name, entry in summary["benchmarks"].items():  # optional ones may have no quick form
        assert entry["status"] in ("ok", "skipped"), (name, entry.get("status"))
    # The Spark scripts ran in one process, so they started one JVM between them.
    assert all(summary["benchmarks"][name].get("shared_process")
               for name in ("join_throughput", "naive_vs_lookup", "point_in_time")), (
        summary["benchmarks"])
    # A Delta history reload after one commit read that commit only.
    assert summary["headline"]["delta_history_reload_reads_only_its_commit"] is True
    missing = [key for key in HEADLINE if summary["headline"].get(key) is None]
    assert not missing, missing
    assert (tmp_path / "plot.png").stat().st_size > 10_000
    # --replot redraws from that run's summary where --out says, and nothing else.
    (tmp_path / "plot.png").unlink()
    replot = subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--replot", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert replot.returncode == 0, replot.stderr[-2000:]
    assert (tmp_path / "plot.png").stat().st_size > 10_000


def test_replot_without_results_says_what_to_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--replot", "--out", str(tmp_path / "none")],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 1
    assert "no results at" in done.stderr
    assert "run benchmarks/run_all.py first" in done.stderr
