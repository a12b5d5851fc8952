"""A first script run with a virtualenv's interpreter, not activated (issue 27): Spark's
local workers would start ``python3`` from PATH, which lacks the library. The first
``lookup_join`` refuses on the driver, at once, naming PYSPARK_PYTHON, instead of tasks
failing after 30 s with ``ModuleNotFoundError``. Each case starts Spark in a process of
its own, whose environment is the script's."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCRIPT = """
import datetime as dt
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .getOrCreate())
from lookup import FullCachingLookupProvider, lookup_join
from scan import CollectionSource
from spark_lookup.errors import ConfigError
from triggers import PeriodicCacheReloadTrigger
provider = FullCachingLookupProvider.of(
    CollectionSource([(1, "a")], schema="id BIGINT, name STRING"),
    PeriodicCacheReloadTrigger(dt.timedelta(hours=1)), ["id"])
try:
    joined = lookup_join(spark.range(3), provider, on="id")
except ConfigError as exc:
    print("REFUSED:", exc)
else:
    print("ACCEPTED", joined.columns)
spark.stop()
"""


def script_env() -> dict[str, str]:
    """This process's environment less what the test session's Spark Connect server put
    there (which would make a plain builder a Connect one)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}


def run(tmp_path: Path, path_first: str) -> str:
    env = {k: v for k, v in script_env().items() if k != "PYSPARK_PYTHON"}
    env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    script = tmp_path / "first_job.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                          text=True, timeout=240, cwd=Path(__file__).resolve().parents[2],
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_a_python3_without_the_library_is_refused_on_the_driver(tmp_path: Path) -> None:
    # A python3 on PATH that cannot import the library: the interpreter itself, isolated
    # from every site-packages (what the system's python3 is to a virtualenv).
    bare = tmp_path / "bin"
    bare.mkdir()
    shim = bare / "python3"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    out = run(tmp_path, str(bare))
    assert "REFUSED:" in out
    assert "PYSPARK_PYTHON" in out
    assert "cannot import spark-lookup" in out
    assert str(shim) in out


def test_the_driver_environments_python3_is_accepted(tmp_path: Path) -> None:
    out = run(tmp_path, str(Path(sys.executable).parent))
    assert "ACCEPTED ['id', 'name']" in out


STOP_SCRIPT = """
import datetime as dt, os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
builder = SparkSession.builder.config("spark.ui.enabled", "false")
spark = (builder.remote("local[2]") if sys.argv[1] == "connect"
         else builder.master("local[2]")).getOrCreate()
from lookup import FullCachingLookupProvider, lookup_join, lookup_metrics
from scan import CollectionSource
from triggers import PeriodicCacheReloadTrigger
provider = FullCachingLookupProvider.of(
    CollectionSource([(1, "a")], schema="id BIGINT, name STRING"),
    PeriodicCacheReloadTrigger(dt.timedelta(hours=1)), ["id"])
plain = lookup_join(spark.range(3), provider, on="id").collect()
observed = lookup_join(spark.range(3), provider, on="id", metrics=True).collect()
print("ROWS", len(plain), len(observed), lookup_metrics(provider).hit_count >= 1)
spark.stop()
print("STOPPED")
"""


@pytest.mark.parametrize("kind", ["classic", "connect"])
def test_a_plain_batch_job_stops_without_an_error_log(tmp_path: Path, kind: str) -> None:
    """Issue 27: ``spark.stop()`` after a batch job logged ``ERROR ErrorUtils: Spark
    Connect RPC error during: releaseExecute``; no ERROR line may come from our code."""
    pytest.importorskip("pyspark.sql.connect.session")
    script = tmp_path / "stop_job.py"
    script.write_text(STOP_SCRIPT)
    done = subprocess.run([sys.executable, str(script), kind], env=script_env(),
                          capture_output=True, text=True,
                          timeout=240, cwd=Path(__file__).resolve().parents[2], check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ROWS 3 3 True" in done.stdout
    assert "STOPPED" in done.stdout
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert errors == []
