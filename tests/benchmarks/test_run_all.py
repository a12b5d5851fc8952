"""``benchmarks/run_all.py --replot`` and ``--out`` without running a benchmark: from a
summary written here, in seconds (no Spark, no servers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.env import child_env

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "benchmarks"

JOIN = {
    "args": {"rows": 1000, "keys": 10},
    "median_rows_per_s": {
        "1. mapInPandas pass-through": 1000.0,
        "2. lookup_join, full cache": 500.0,
        "3. lookup_join, partial cache, warm": 250.0,
    },
}


def write_summary(directory: Path, results: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "summary.json"
    path.write_text(json.dumps({
        "started_at": "2026-01-02T03:04:05+00:00",
        "machine": {"cpus": 2, "cpu_model": "test"},
        "load_average": {"before": [1.0, 1.0, 1.0], "after": [2.0, 2.0, 2.0]},
        "headline": {},
        "plot": None,
        "benchmarks": {name: {"status": "ok", "result": result}
                       for name, result in results.items()},
    }))
    return path


def replot(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "benchmarks/run_all.py", "--replot", *args],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120, check=False,
    )


def test_replot_redraws_the_summary_under_out_and_records_the_plot(tmp_path: Path) -> None:
    summary_path = write_summary(tmp_path / "run", {"join_throughput": JOIN})
    repo_plot = HERE / "plot.png"
    before = repo_plot.stat().st_mtime_ns if repo_plot.exists() else None
    done = replot("--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-2000:]
    plot_path = (tmp_path / "run" / "plot.png").resolve()
    assert plot_path.stat().st_size > 10_000
    summary = json.loads(summary_path.read_text())
    assert summary["plot"] == str(plot_path)
    assert summary["headline"]["join_full_cache_vs_mapInPandas"] == 0.5
    assert (repo_plot.stat().st_mtime_ns if repo_plot.exists() else None) == before


def test_replot_with_nothing_to_plot_says_so(tmp_path: Path) -> None:
    summary_path = write_summary(tmp_path, {})
    done = replot("--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "(nothing to plot)" in done.stdout
    assert not (tmp_path / "plot.png").exists()
    assert json.loads(summary_path.read_text())["plot"] is None


def test_replot_of_a_file_that_is_no_summary_says_so(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text("{not json")
    done = replot("--out", str(tmp_path))
    assert done.returncode == 1
    assert "is no summary of run_all.py" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_run_and_its_replot_agree_on_where_summary_and_plot_go(tmp_path: Path) -> None:
    from benchmarks.run_all import destinations

    assert destinations(tmp_path, quick=False) == (tmp_path, tmp_path / "plot.png")
    assert destinations(tmp_path, quick=True) == (tmp_path, tmp_path / "plot.png")
    assert destinations(None, quick=True) == (HERE / "out" / "quick",
                                              HERE / "out" / "quick" / "plot.png")
    assert destinations(None, quick=False) == (HERE / "out", HERE / "plot.png")
