"""A first script run with a virtualenv's interpreter, not activated (issue 27): Spark's
local workers would start ``python3`` from PATH, which lacks the library. The first
``lookup_join`` refuses on the driver, at once, naming PYSPARK_PYTHON, instead of tasks
failing after 30 s with ``ModuleNotFoundError``. The check reads the driver's environment
when the join is built, so the test session's classic session stands in for the script's
(without PYSPARK_PYTHON, with the PATH under test); a plain batch job's stop runs in a
process of its own, which starts and stops Spark as a script does."""

from __future__ import annotations

import datetime as dt
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lookup import FullCachingLookupProvider, lookup_join
from scan import CollectionSource
from spark_lookup.errors import ConfigError
from tests.conftest import MATRIX_LINE
from tests.env import child_env
from triggers import PeriodicCacheReloadTrigger

pytestmark = [pytest.mark.spark]


def join_as_a_first_script(spark: Any, monkeypatch: pytest.MonkeyPatch,
                           path_first: str) -> Any:
    """Build a join as a script whose environment has no PYSPARK_PYTHON and
    ``path_first`` first on PATH would."""
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("PATH", f"{path_first}{os.pathsep}{os.environ.get('PATH', '')}")
    provider = FullCachingLookupProvider.of(
        CollectionSource([(1, "a")], schema="id BIGINT, name STRING"),
        PeriodicCacheReloadTrigger(dt.timedelta(hours=1)), ["id"])
    return lookup_join(spark.range(3), provider, on="id")


@pytest.mark.classic_only
def test_a_python3_without_the_library_is_refused_on_the_driver(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A python3 on PATH that cannot import the library: the interpreter itself, isolated
    # from every site-packages (what the system's python3 is to a virtualenv).
    bare = tmp_path / "bin"
    bare.mkdir()
    shim = bare / "python3"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(ConfigError) as refused:
        join_as_a_first_script(spark, monkeypatch, str(bare))
    message = str(refused.value)
    assert "PYSPARK_PYTHON" in message
    assert "cannot import spark-lookup" in message
    assert str(shim) in message


@pytest.mark.classic_only
def test_the_driver_environments_python3_is_accepted(
        spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    joined = join_as_a_first_script(spark, monkeypatch, str(Path(sys.executable).parent))
    assert joined.columns == ["id", "name"]


STOP_SCRIPT = """
import datetime as dt, os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
from lookup import FullCachingLookupProvider, lookup_join, lookup_metrics
from scan import CollectionSource
from triggers import PeriodicCacheReloadTrigger
for kind in sys.argv[1:]:
    builder = SparkSession.builder.config("spark.ui.enabled", "false")
    if kind == "connect":
        # An ephemeral port for the local server (PySpark reads it while the session is
        # created); the JVM, started by the classic session before, does not see it.
        os.environ["SPARK_TESTING"] = "1"
    spark = (builder.remote("local[2]") if kind == "connect"
             else builder.master("local[2]")).getOrCreate()
    os.environ.pop("SPARK_TESTING", None)
    provider = FullCachingLookupProvider.of(
        CollectionSource([(1, "a")], schema="id BIGINT, name STRING"),
        PeriodicCacheReloadTrigger(dt.timedelta(hours=1)), ["id"])
    plain = lookup_join(spark.range(3), provider, on="id").collect()
    observed = lookup_join(spark.range(3), provider, on="id", metrics=True).collect()
    print(kind, "ROWS", len(plain), len(observed), lookup_metrics(provider).hit_count >= 1,
          flush=True)
    spark.stop()
    print(kind, "STOPPED", flush=True)
"""


@pytest.mark.slow
@pytest.mark.connect_server
@pytest.mark.skipif(MATRIX_LINE, reason="two Sparks of its own, a minute a line on 2 CPUs: "
                    "the whole suite's line only (tests/conftest.py: MATRIX_LINE)")
def test_a_plain_batch_job_stops_without_an_error_log(tmp_path: Path) -> None:
    """Issue 27: ``spark.stop()`` after a batch job logged ``ERROR ErrorUtils: Spark
    Connect RPC error during: releaseExecute``; no ERROR line may come from our code.
    One process runs the job on a classic session, stops it, then on a Spark Connect
    one (as the test session's fixture does): one JVM start for both kinds. The JVM
    runs with its default options, as a user's script's does: PySpark 4.3's
    ``stop()`` releases the session before its pending releases of executions, and
    with the tests' faster-starting JVM (``JVM_FAST_START``) the server answered those
    late enough to log this error in 1 run of 5 (0 of 6 with the defaults)."""
    pytest.importorskip("pyspark.sql.connect.session")
    script = tmp_path / "stop_job.py"
    script.write_text(STOP_SCRIPT)
    done = subprocess.run([sys.executable, str(script), "classic", "connect"],
                          env=child_env(), capture_output=True, text=True, timeout=240,
                          cwd=Path(__file__).resolve().parents[3], check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    for kind in ("classic", "connect"):
        assert f"{kind} ROWS 3 3 True" in done.stdout, done.stdout
        assert f"{kind} STOPPED" in done.stdout, done.stdout
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert errors == []
