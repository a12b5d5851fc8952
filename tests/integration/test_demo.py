"""The demo: ``python -m examples demo`` runs end to end in a subprocess (it starts its own
SparkSession, and a process holds one), on a classic session and with ``--remote`` on the
test session's Spark Connect server, and shows the updated dimension values reaching the
stream; the command line and the per-batch marking are checked without Spark."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from examples.__main__ import main
from examples.demo import BATCH_TIME, CHANGES, BatchPrinter, split_batches
from tests.conftest import MATRIX_LINE
from tests.env import child_env

ROOT = Path(__file__).resolve().parents[2]


def _run_demo(*session: str, **env: str) -> tuple[str, float]:
    """Run ``python -m examples demo`` with ``session``'s arguments; its output and how
    long it took (seconds), once it has succeeded."""
    started = time.monotonic()
    result = subprocess.run(
        # A generous limit: on a loaded 2-CPU machine the first batch can take a minute.
        [sys.executable, "-m", "examples", "demo", "--seconds", "10", "--time-limit", "240",
         *session],
        cwd=ROOT,
        env=child_env(PYSPARK_PYTHON=sys.executable, **env),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    took = time.monotonic() - started
    assert result.returncode == 0, f"{result.stdout}\n--- stderr ---\n{result.stderr[-5000:]}"
    return result.stdout, took


def _assert_the_updated_values_show(out: str, took: float) -> None:
    # At least 10 s of streaming (the shortest --seconds); when the new values are late
    # the query runs on, but the demo ends within its time limit.
    assert 10 < took < 250, out
    first_update = out.index("UPDATE customers SET tier = 'platinum'", out.index("Streaming."))
    before, after = out[:first_update], out[first_update:]
    assert re.search(r"Edsger\s+bronze\s+NL", before), out  # old values first
    assert re.search(r"Edsger\s+platinum\*", after), out  # partial cache: new tier
    assert re.search(r"\bmouse\s+17\.00\*", after), out  # full cache: new price
    assert "19.50*" not in out
    assert "bronze*" not in out
    assert out.count("first seen in batch") == 2, out
    metrics = {
        m["name"]: {k: int(v) for k, v in m.groupdict().items() if k != "name"}
        for m in re.finditer(
            r"^\s+(?P<name>customers|products)\s+(?:PARTIAL|FULL)\s+(?P<hits>\d+)\s+"
            r"(?P<misses>\d+)\s+(?P<loads>\d+)\s+(?P<failures>\d+)", out, re.MULTILINE)
    }
    assert set(metrics) == {"customers", "products"}, out
    assert metrics["customers"]["misses"] > 0
    assert metrics["customers"]["loads"] > 0
    assert metrics["products"]["hits"] > 0
    assert metrics["products"]["misses"] == 0
    # Loaded at open, then reloaded (the new price above shows it). The count may miss
    # the reload: a worker reports its metrics with its tasks, and the reload may have run
    # in the background of a worker that got no task after it (the others switched to the
    # host's new snapshot without loading).
    assert metrics["products"]["loads"] >= 1
    assert metrics["customers"]["failures"] == metrics["products"]["failures"] == 0


@pytest.mark.spark
@pytest.mark.slow
def test_demo_shows_the_updated_values_and_ends_by_itself() -> None:
    import pyspark

    if MATRIX_LINE and not pyspark.__version__.startswith("3.5."):
        # A Spark of its own beside the test sessions' two: a minute a line on 2 CPUs.
        pytest.skip("the matrix's other lines run the demo on 3.5, on a classic session "
                    "(tests/conftest.py: MATRIX_LINE)")
    _assert_the_updated_values_show(*_run_demo())


@pytest.mark.spark
@pytest.mark.slow
def test_demo_on_spark_connect_shows_the_updated_values_too(spark: Any, spark_kind: str) -> None:
    """The demo with ``--remote sc://...``, on the test session's local Connect server:
    the same run and checks, without a Spark of its own to start (a JVM and its JIT:
    the ``--connect`` run it replaces took 10-15 s longer on 2 CPUs). ``--connect``
    starts its local server as the fixture does (tests/conftest.py); its command line
    is checked below."""
    if spark_kind != "connect":
        pytest.skip("the test above runs the demo on a classic session")
    if MATRIX_LINE:
        pytest.skip("the matrix's other lines run the demo on 3.5, on a classic session "
                    "(tests/conftest.py: MATRIX_LINE)")
    # The server listens on an ephemeral port (the fixture sets SPARK_TESTING) and
    # takes the token of its start.
    client = spark.client
    _assert_the_updated_values_show(*_run_demo(
        "--remote", f"sc://{client._builder.endpoint}",
        SPARK_CONNECT_AUTHENTICATE_TOKEN=client.token))


def test_command_line_help_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "demo" in capsys.readouterr().out
    for bad in (["demo", "--seconds", "5"], ["demo", "--seconds", "soon"], [],
                ["demo", "--seconds", "60", "--time-limit", "70"],
                ["demo", "--remote", "http://x"], ["demo", "--connect", "--remote", "local"]):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2


def _order(order_id: int, customer_id: int, tier: str, product_id: int,
           price: float) -> dict[str, Any]:
    return {"order_id": order_id, "customer_id": customer_id, "product_id": product_id,
            "quantity": 1, "name": "Edsger", "tier": tier, "country": "NL",
            "product_name": "mouse", "product_price": price, "amount": price}


def test_batch_printer_marks_new_and_cached_values() -> None:
    now = [0.0]
    out = io.StringIO()
    printer = BatchPrinter(CHANGES, out, lambda: now[0])

    class _Connection:
        def execute(self, *args: Any) -> None:
            pass

        def commit(self) -> None:
            pass

    printer([_order(1, 3, "bronze", 2, 19.5)], 0)
    now[0] = 5.0
    printer.apply(CHANGES, _Connection())  # type: ignore[arg-type]
    now[0] = 6.0
    printer([_order(2, 3, "bronze", 2, 19.5), _order(3, 3, "platinum", 2, 19.5)], 1)
    # One worker's cache has the new tier, another's the old: seen, but not settled.
    assert printer.first_new == {CHANGES[0]: (1, 1.0)}
    assert not printer.all_settled()
    now[0] = 9.0
    printer([_order(4, 3, "platinum", 2, 17.0)], 2)
    printer([], 3)  # empty batches are not printed
    lines = out.getvalue().splitlines()
    assert "bronze " in lines[1]
    assert "*" not in lines[1]
    assert "(cached)" not in lines[1]
    assert "bronze (cached)" in out.getvalue()
    assert "19.50 (cached)" in out.getvalue()
    assert "platinum*" in lines[-1]
    assert "17.00*" in lines[-1]
    assert printer.batches == 3
    assert printer.events == 4
    assert printer.first_new == {CHANGES[0]: (1, 1.0), CHANGES[1]: (2, 4.0)}
    assert printer.last_old == {CHANGES[0]: 1, CHANGES[1]: 1}
    assert printer.all_seen()
    assert printer.all_settled()


def test_rows_of_the_memory_table_split_into_micro_batches_by_their_time() -> None:
    rows = [{**_order(i, 3, "bronze", 2, 19.5), BATCH_TIME: t}
            for i, t in ((3, 20), (1, 10), (2, 10), (4, 30))]
    batches = split_batches(rows)
    assert [t for t, _ in batches] == [10, 20, 30]
    assert [[r["order_id"] for r in group] for _, group in batches] == [[1, 2], [3], [4]]
    assert all(BATCH_TIME not in r for _, group in batches for r in group)
