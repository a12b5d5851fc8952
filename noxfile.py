"""The PySpark test matrix: the suite's Spark tests on every supported PySpark line.

``make test`` runs the whole suite on PySpark 4.3 in ``.venv``, then one session here
per other line (``make test-matrix``): the tests marked ``spark`` on classic sessions
(the joins, metrics, SQL, refreshed views, data source, streaming, the contract on
PostgreSQL, the README and docs snippets, the join benchmark; the demo and the
local-cluster job on 3.5), on Spark Connect those marked ``connect_on_every_line`` where
the line ships a Connect server (not 3.5), plus those marked ``matrix`` (the PySpark
gates of ``tests/spark_lookup/test_compat.py``): tests/conftest.py, ``MATRIX_LINE``. Each line
gets a virtualenv of its own under ``.nox/``, made by uv (its cache under ``~/.cache/uv``
keeps a fresh clone's first run to seconds a line, once PySpark's wheels are cached).

``make test-spark VERSION=3.5.7`` runs one line with another patch release
(``PYSPARK_VERSION`` overrides the session's default patch).

``make test-extras`` runs one session per extra (``extras-postgres``, ...): a virtualenv
with PySpark, the library (installed, not editable) and that extra alone runs the
extra's example of docs/extras.md (tests/extras_examples.py), so an extra that lacks
what its docs use fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = []  # only what is named: make test-matrix / test-spark

LINES = {"3.5": "3.5.9", "4.0": "4.0.5", "4.1": "4.1.4", "4.2": "4.2.1", "4.3": "4.3.0"}
"""Each supported PySpark line and the patch release the matrix tests by default."""

EXTRAS = {"3.5": "test,pyspark35"}
"""The project's extras a line installs (default ``test``): PySpark 3.5's own extras
cap numpy below 2, which pyarrow 26 refuses (``pyspark35`` caps pyarrow too)."""


WHEELS = Path(os.environ.get("SPARK_LOOKUP_WHEELS",
                             Path.home() / ".cache" / "spark-lookup" / "pyspark-wheels"))
"""Where PySpark's wheels are kept once built. PyPI has PySpark as a source distribution
only (300-400 MB); uv caches what it builds per build environment, so a fresh clone (a
new .venv) would build each line again, minutes each."""


def _pyspark_wheel(session: nox.Session, version: str) -> Path:
    wheel = WHEELS / f"pyspark-{version}-py2.py3-none-any.whl"
    if not wheel.exists():
        WHEELS.mkdir(parents=True, exist_ok=True)
        # pip (of .venv, which runs nox): it builds the sdist once and keeps the wheel.
        session.run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(WHEELS), f"pyspark=={version}", external=True)
    return wheel


def _spark(session: nox.Session, line: str) -> None:
    version = os.environ.get("PYSPARK_VERSION") or LINES[line]
    if not version.startswith(line + "."):
        session.error(f"PYSPARK_VERSION={version} is not of the {line} line")
    wheel = _pyspark_wheel(session, version)
    session.install("-e", f".[{EXTRAS.get(line, 'test')}]", f"pyspark[connect] @ {wheel.as_uri()}")
    matrix_line = {"SPARK_LOOKUP_MATRIX_LINE": "1"} if line != "4.3" else {}
    session.run("python", "-m", "pytest", "tests", "-m", "spark or matrix",
                "-n", "2", "--dist", "loadgroup", *session.posargs, env=matrix_line)


for _line in LINES:
    # One session per line, named for it: spark-3.5, spark-4.0, ...
    nox.session(name=f"spark-{_line}")(
        lambda session, line=_line: _spark(session, line))


EXTRA_EXAMPLES = ("postgres", "adbc", "mysql", "redis", "delta", "iceberg")
"""The extras with an example in docs/extras.md (tests/test_docs_site.py keeps them in
step with the page)."""


def _extra(session: nox.Session, extra: str) -> None:
    wheel = _pyspark_wheel(session, LINES["4.3"])
    session.install(f".[{extra}]", f"pyspark @ {wheel.as_uri()}")
    script = Path(__file__).resolve().parent / "tests" / "extras_examples.py"
    session.chdir(session.create_tmp())  # the library as installed, not the checkout
    session.run("python", str(script), extra)


for _name in EXTRA_EXAMPLES:
    nox.session(name=f"extras-{_name}")(
        lambda session, extra=_name: _extra(session, extra))
