"""The join, the caches and the driver-side metrics across two executor JVMs
(``local-cluster[2,1,1024]``), in a separate driver process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.env import child_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(900)
def test_lookup_join_on_two_executor_jvms() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_job"], cwd=ROOT, capture_output=True,
        text=True, timeout=600, check=False, env=child_env(),
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines, done.stdout[-3000:]
    results = json.loads(lines[-1][len("RESULT "):])
    for name in ("partial", "full"):
        result = results[name]
        assert result["rows"] == 4000
        assert result["matched"] == sum(1 for i in range(4000) if i % 120 < 100)
        assert result["wrong"] == 0
        assert len(result["executors"]) == 2, result["executors"]
        metrics = result["metrics"]
        assert metrics["hit_count"] + metrics["miss_count"] >= 120
        assert metrics["num_cached_records"] >= 100
    # Both executors run on this host: the first worker to open the full cache scans
    # the table and publishes the snapshot; every other worker maps it without a scan.
    assert results["full"]["metrics"]["load_count"] == 1
    assert results["partial"]["metrics"]["load_count"] >= 2
