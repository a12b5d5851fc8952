"""``benchmarks/_one_process.py``: scripts run one after the other in one process (how a
quick run's Spark scripts share a JVM), each with its own arguments and status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.env import child_env

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import os, sys
from pathlib import Path
Path(sys.argv[1]).write_text(f"{os.getpid()} {__name__} {sys.argv[2:]}")
print("ran", Path(sys.argv[0]).name)
"""


def test_scripts_share_the_process_and_each_gets_its_status(tmp_path: Path) -> None:
    first, second = tmp_path / "first.py", tmp_path / "second.py"
    failing, raising = tmp_path / "failing.py", tmp_path / "raising.py"
    first.write_text(SCRIPT)
    second.write_text(SCRIPT)
    failing.write_text("raise SystemExit('no servers')\n")
    raising.write_text("raise RuntimeError('broken')\n")
    spec = [["first", str(first), [str(tmp_path / "1.txt"), "--quick"]],
            ["failing", str(failing), []],
            ["raising", str(raising), []],
            ["second", str(second), [str(tmp_path / "2.txt")]]]
    status = tmp_path / "status.json"
    done = subprocess.run(
        [sys.executable, "benchmarks/_one_process.py", str(status), json.dumps(spec)],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    pid, name, arguments = (tmp_path / "1.txt").read_text().split(" ", 2)
    assert (name, arguments) == ("__main__", "['--quick']")
    assert (tmp_path / "2.txt").read_text().startswith(f"{pid} __main__ ")
    assert "ran first.py" in done.stdout
    assert "ran second.py" in done.stdout
    assert "no servers" in done.stderr
    assert "RuntimeError: broken" in done.stderr
    statuses = json.loads(status.read_text())
    assert {name: (s["status"], s["returncode"]) for name, s in statuses.items()} == {
        "first": ("ok", 0), "failing": ("failed", 1), "raising": ("failed", 1),
        "second": ("ok", 0)}
