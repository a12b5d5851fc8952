"""Fixtures of the refreshed-view tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.refresh.support import make_db


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A SQLite file with a ``countries`` table of three rows."""
    return make_db(tmp_path / "ref.db")
