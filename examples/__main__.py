"""Command line: ``python -m examples demo [--connect | --remote URL]``."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence

__all__ = ["main"]


def _seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}, got {text}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m examples",
        description="spark-lookup: Flink-style lookup joins for PySpark.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run the streaming enrichment demo (local Spark, SQLite; about a minute)",
        description=(
            "Stream JSON order events through two lookup joins on local Spark: customers "
            "from SQLite through a partial cache (TTL), products through a full cache "
            "reloaded every few seconds. The demo updates both tables while the query runs "
            "and shows the new values reaching the stream, then prints the cache metrics. "
            "Needs Java 17; no server."
        ),
    )
    # Below 10 s the UPDATEs (after a third of the run) have no time to show.
    demo.add_argument(
        "--seconds", type=_seconds(10, 600), default=60.0,
        help="how long the streaming query runs (default 60); the UPDATEs happen after a "
             "third of it",
    )
    demo.add_argument(
        "--time-limit", type=_seconds(30, 1800), default=120.0, metavar="SECONDS",
        help="end within this many seconds in any case, Spark's start and stop included "
             "(default 120); must exceed --seconds by 20",
    )
    session = demo.add_mutually_exclusive_group()
    session.add_argument(
        "--remote", type=_remote, metavar="URL",
        help="run on Spark Connect: sc://host:port of a running server on this machine "
             "(its executors read the demo's temporary files, and its Python needs "
             "spark-lookup installed), or local[N] to start a local Connect server",
    )
    session.add_argument(
        "--connect", action="store_const", const="local[2]", dest="remote",
        help="run on Spark Connect, with a local server started in this process "
             "(= --remote local[2])",
    )
    return parser


def _remote(text: str) -> str:
    if text.startswith("sc://") or re.fullmatch(r"local(\[(\d+|\*)\])?", text):
        return text
    raise argparse.ArgumentTypeError(f"expected sc://host:port or local[N], got {text!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Parameters
    ----------
    argv
        The arguments (default: ``sys.argv[1:]``).
    """
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from examples.demo import DemoSettings, run_demo

        if args.time_limit < args.seconds + 20:
            parser.error(f"--time-limit {args.time_limit:g} leaves no time to start and "
                         f"stop Spark around --seconds {args.seconds:g}")
        try:
            return run_demo(DemoSettings(seconds=args.seconds, time_limit=args.time_limit,
                                         remote=args.remote))
        except KeyboardInterrupt:
            print("\ninterrupted; Spark stopped", file=sys.stderr)
            return 130
    raise AssertionError(f"unhandled command {args.command!r}")  # argparse requires one


if __name__ == "__main__":
    sys.exit(main())
