"""Deployed as users deploy it: the join, the caches and the driver-side metrics across
two executor JVMs (``local-cluster[2,1,1024]``) whose Python does not have spark-lookup
installed, the library reaching them only through ``spark-submit --py-files`` (the
wheel, under a ``.zip`` name: PySpark puts only ``.zip``, ``.egg`` and ``.jar`` files of
``--py-files`` on the executors' path). Runs on PySpark 3.5 and 4.3 (the test matrix)."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.env import JVM_FAST_START, child_env

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEPLOYED_LINES = ("3.5.", "4.3.")


def _uv() -> str:
    from uv import find_uv_bin  # the test extra's uv: fast virtualenvs from its cache

    return str(find_uv_bin())


def _executor_python(where: Path) -> Path:
    """A virtualenv with the library's dependencies and not the library: a ``.pth`` file
    puts this interpreter's site-packages on its path as a plain directory, so the
    executors import PySpark, pyarrow and pandas from there (nothing to install) while
    the editable install of spark-lookup, which only a processed ``.pth`` file of that
    directory would enable, stays out of reach."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)],
                   check=True, timeout=120)
    python = where / "bin" / "python"
    probe = [str(python), "-c", "import site; print(site.getsitepackages()[0])"]
    own = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    # Where this interpreter imports them from: its site-packages, or a directory a .pth
    # file of it names (a worktree's virtualenv that borrows another's packages).
    deps = list(dict.fromkeys(str(Path(importlib.import_module(module).__file__).parents[1])
                              for module in ("pyspark", "pyarrow", "pandas")))
    Path(own, "spark_lookup_test_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([str(python), "-c", "import pyspark, pyarrow, pandas"], check=True,
                   cwd=where, env=_without_checkout())
    lacks = subprocess.run([str(python), "-c", "import lookup"], capture_output=True,
                           check=False, cwd=where, env=_without_checkout())
    assert lacks.returncode != 0, "the executors' Python must not have spark-lookup"
    return python


def _without_checkout(**extra: str) -> dict[str, str]:
    """The environment of a child with no PYTHONPATH: the test session's holds the
    checkout, which would reach the executors (the JVMs hand it on to their workers)."""
    env = child_env(**extra)
    env.pop("PYTHONPATH", None)
    return env


def _archive(where: Path) -> Path:
    """The wheel, as users build it, copied to a ``.zip`` name for ``--py-files``."""
    subprocess.run([_uv(), "build", "--wheel", "--quiet", "--out-dir", str(where), str(ROOT)],
                   check=True, timeout=600)
    (wheel,) = where.glob("spark_lookup-*.whl")
    archive = where / (wheel.stem + ".zip")
    shutil.copyfile(wheel, archive)
    return archive


@pytest.mark.timeout(1800)
def test_lookup_join_on_two_executor_jvms_with_the_library_in_py_files(tmp_path: Path) -> None:
    import pyspark

    if not pyspark.__version__.startswith(DEPLOYED_LINES):
        pytest.skip(f"PySpark {pyspark.__version__}: the matrix deploys on the oldest and "
                    f"newest lines only, {DEPLOYED_LINES} (three JVMs: minutes a line)")

    executor_python = _executor_python(tmp_path / "executor-env")
    archive = _archive(tmp_path / "dist")
    job = tmp_path / "job" / "cluster_job.py"
    job.parent.mkdir()
    shutil.copyfile(Path(__file__).with_name("cluster_job.py"), job)
    spark_submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    env = _without_checkout(PYSPARK_PYTHON=str(executor_python),
                            PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [str(spark_submit), "--master", "local-cluster[2,1,1024]",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m",
         # Three JVMs start on 2 CPUs: these options start them about a third faster
         # (the job checks values, not speed).
         "--conf", f"spark.driver.extraJavaOptions={JVM_FAST_START}",
         "--conf", f"spark.executor.extraJavaOptions={JVM_FAST_START}",
         "--py-files", str(archive), str(job)],
        cwd=job.parent, capture_output=True, text=True, timeout=1200, check=False, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines, done.stdout[-3000:]
    results = json.loads(lines[-1][len("RESULT "):])
    for name in ("partial-pandas", "full-arrow"):
        result = results[name]
        assert result["rows"] == 4000
        assert result["matched"] == sum(1 for i in range(4000) if i % 120 < 100)
        assert result["wrong"] == 0
        assert len(result["executors"]) == 2, result["executors"]
        # The executors imported the library from the archive, with their own Python.
        assert result["pythons"] == [str(executor_python)]
        assert all(archive.name in path for path in result["imported_from"]), result
        metrics = result["metrics"]
        assert metrics["hit_count"] + metrics["miss_count"] >= 120
        assert metrics["num_cached_records"] >= 100
    # Both executors run on this host: the first worker to open the full cache scans
    # the table and publishes the snapshot; every other worker maps it without a scan.
    assert results["full-arrow"]["metrics"]["load_count"] == 1
    # The partial caches of both executors share the host tier: each key is loaded from
    # the source about once (120 keys), the other executor's misses are host hits.
    partial = results["partial-pandas"]["metrics"]
    assert partial["num_host_hits"] >= 1
    assert partial["miss_count"] - partial["num_host_hits"] <= 120
