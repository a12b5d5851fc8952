"""Issue 44's connection-limit run, with a smaller stream: a PostgreSQL role with
CONNECTION LIMIT 2, a partial cache over it, ``lookup_join`` on ``local[6]`` (had failed
every task with "too many connections for role"). Its own process (connection_limit_job.py)
on ``local[6]``: the suite's shared session is ``local[2]``, too few tasks to overrun the
role (test_connection_limit_spark.py holds one of the role's connections for that).

Two runs of one job:

- ``defaults``: the provider at its defaults (a host tier shared by the six workers, a
  budget of 4 connections a host, above the role's 2). Every row right, no failed load,
  no failed task. It did wait here (2 to 25 waits a run), but the host tier's single
  loads can keep the connections at or under 2, so this run does not require a wait.
- ``overlap``: forces the overrun, to see the waits counted: each worker caching alone
  (``share_across_workers=False``, so the six load the same keys at once) under a budget
  of 6. The role refuses the connections past its 2 (``SourceBusyError``) and the loads
  wait for them: at least one wait, and still no failed load or task. Lowering the budget
  is not how to pass: it would only keep the role from ever refusing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.env import JVM_FAST_START, child_env
from tests.pg_roles import role_reading_dim

pytestmark = [pytest.mark.spark, pytest.mark.postgres, pytest.mark.slow,
              pytest.mark.whole_suite_only]

KEYS = 3_000
EVENTS = 30_000
JOB = Path(__file__).with_name("connection_limit_job.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def limited_role(postgres_dsn: str, pg_schema: str) -> Iterator[str]:
    """A login role with CONNECTION LIMIT 2 reading ``dim`` (ids 0 to KEYS - 1) of the
    test's schema; its sessions ended and the role dropped afterwards."""
    with role_reading_dim(postgres_dsn, pg_schema, connection_limit=2, ids="g",
                          count=KEYS, first=0) as role:
        yield role


def _job(config: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(JOB), json.dumps(config)], cwd=ROOT, capture_output=True,
        text=True, timeout=240, check=False,
        env=child_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable))
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0, done.stderr[-5000:]
    assert lines, (done.stdout[-3000:], done.stderr[-3000:])
    results: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    return results


@pytest.mark.timeout(300)
def test_a_role_with_connection_limit_2_on_local6_completes_with_its_waits_counted(
        postgres_dsn: str, pg_schema: str, limited_role: str) -> None:
    results = _job({
        "dsn": postgres_dsn, "schema": pg_schema, "role": limited_role, "keys": KEYS,
        "events": EVENTS, "java_options": JVM_FAST_START,
        "runs": [{"name": "defaults", "options": {}},
                 {"name": "overlap", "options": {"share_across_workers": False,
                                                 "max_source_connections": 6}}],
    })
    print(json.dumps(results, indent=1))  # shown with -s or on failure
    for name, result in results.items():
        assert result["error"] is None, (name, result)
        assert result["failed_tasks"] == 0, (name, result)
        assert (result["rows"], result["events"], result["wrong"]) == (EVENTS, True, 0), \
            (name, result)
        metrics = result["metrics"]
        assert metrics["num_load_failures"] == 0, (name, metrics)
        assert metrics["miss_count"] >= KEYS, (name, metrics)
    assert results["overlap"]["metrics"]["num_connection_waits"] >= 1, results["overlap"]
