"""Run every benchmark, one subprocess each (in a quick run, one for all of them), then
write a summary and the plot.

The scripts run in sequence (never two at once: they would measure each other):
cache_ops, scan_full_load, lookup_batch_pg, join_throughput, naive_vs_lookup,
cache_memory, and scan_file_load / file_source_pruning / lakehouse_load /
refresh_vs_lookup / point_in_time / worker_churn when they are in the tree. Each writes its JSON to
``benchmarks/out/``; this script collects them into ``benchmarks/out/summary.json``
(status, duration and command of every script, its result, the headline ratios, the
machine and the load average) and plots the main comparison -- throughput of the
mapInPandas pass-through, ``lookup_join`` with a full and a partial cache, Spark's
broadcast join and the naive per-row UDFs, whichever ran -- to
``benchmarks/plot.png``.

``--quick`` is the reduced form CI runs (under 4 minutes on a 2-CPU machine): each
script gets ``--quick`` (or reduced sizes, for scripts without that option; a script with
neither is left out, status "skipped"), and runs from a copy of ``benchmarks/`` in a
temporary directory, so its JSON never replaces a full run's; the summary and plot go to
``benchmarks/out/quick/``. The scripts of a quick run run one after the other in one
process, so the Spark ones start one JVM between them (``_one_process.py``). Quick
figures are smoke figures: one round, small sizes.

``--out DIR`` puts the summary and the plot of either kind of run in ``DIR`` instead (the
scripts' own JSON files stay in their ``out/``). ``--replot`` runs nothing: it reads the
summary of an earlier run from where that run wrote it (``--out``, ``--quick`` or
neither, as then), recomputes the headline ratios and redraws the plot next to it.

    .venv/bin/python benchmarks/run_all.py            # full; what `make bench` runs
    .venv/bin/python benchmarks/run_all.py --quick    # CI
    .venv/bin/python benchmarks/run_all.py --replot   # redraw the full run's plot

Exits 1 when any script failed or timed out (the others still run).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# In run order: the cheap in-process ones first, Spark last.
SCRIPTS = ("cache_ops", "scan_full_load", "scan_file_load", "file_source_pruning",
           "lakehouse_load", "lookup_batch_pg",
           "cache_memory", "snapshot_check", "join_throughput", "naive_vs_lookup",
           "refresh_vs_lookup", "point_in_time", "worker_churn")
REQUIRED = ("cache_ops", "scan_full_load", "lookup_batch_pg", "cache_memory", "join_throughput",
            "naive_vs_lookup")
# Reduced sizes for the scripts that have no --quick option of their own.
# Scripts with neither are left out of a quick run (worker_churn: 40 Python worker starts
# at any size, minutes on 2 CPUs).
QUICK_ARGS = {
    # A single DefaultLookupCache.put is a batch of one (about 1-3k/s on 2 CPUs): 20,000
    # of them, 3 rounds, took 30-85 s of a quick run; 2,000 still time every case.
    "cache_ops": ["--ops", "2000", "--keys", "1000", "--repeats", "2"],
    "scan_full_load": ["--rows", "50000", "--repeats", "2"],
}
TIMEOUT_S = {True: 300, False: 4 * 3600}  # per script, quick and full
# A quick run runs every script in one process (see _one_process.py), so the Spark ones
# start one JVM (starting Spark took 10-20 s of each on 2 CPUs) and the others one Python
# with its imports (separately, the eight took 37 s against 26 s in one process, load
# average 7). A full run gives every script a process and a fresh JVM of its own: the
# JIT state and memory one left would be measured by the next.


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def script_args(path: Path, quick: bool) -> list[str] | None:
    """The arguments ``path`` runs with; None: it has no quick form (left out)."""
    if not quick:
        return []
    if '"--quick"' in path.read_text():
        return ["--quick"]
    return QUICK_ARGS.get(path.stem)


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """End the process group of ``process`` (started in a session of its own)."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _command(name: str, path: Path, extra: list[str]) -> tuple[list[str], str]:
    """The command that runs a script, and how it is shown."""
    command = [sys.executable, str(path), *extra]
    return command, " ".join([".venv/bin/python", f"benchmarks/{name}.py", *extra])


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # The project itself (editable install or not) for the scripts and their Spark workers.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _wait(process: subprocess.Popen[bytes], timeout: float) -> int | None:
    """The exit code of ``process``, or None when it ran out of time (its group ended)."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_group(process)
        return None
    except BaseException:  # Ctrl-C: do not leave the script running
        stop_group(process)
        raise


def _collect(name: str, entry: dict[str, Any], out_dir: Path, started_wall: float) -> None:
    """Add the JSON the script wrote during this run to ``entry`` (its name may carry a
    _quick suffix), and say how it ended."""
    written = sorted((p for p in out_dir.glob(f"{name}*.json")
                      if p.stat().st_mtime >= started_wall - 1),
                     key=lambda p: p.stat().st_mtime)
    if written:
        entry["result_file"] = str(written[-1])
        entry["result"] = json.loads(written[-1].read_text())
    elif entry["status"] == "ok":
        entry["status"] = "no result"
    print(f"=== {name}: {entry['status']} in {entry['seconds']:.0f} s", flush=True)


def run_script(name: str, path: Path, out_dir: Path, quick: bool) -> dict[str, Any]:
    """Run one benchmark script; its output streams through, its JSON is collected."""
    extra = script_args(path, quick)
    if extra is None:
        print(f"\n=== {name}: no quick form, left out of the quick run", flush=True)
        return {"status": "skipped", "reason": "no --quick option and no reduced sizes known"}
    command, shown = _command(name, path, extra)
    print(f"\n=== {shown}", flush=True)
    started_wall = time.time()
    started = time.perf_counter()
    entry: dict[str, Any] = {"command": shown}
    # A session of its own, so that a timeout ends the script's whole process group (its
    # Spark JVM and Python workers included), not only the script.
    process = subprocess.Popen(command, cwd=ROOT, env=_env(), start_new_session=True)
    entry["returncode"] = _wait(process, TIMEOUT_S[quick])
    entry["status"] = ("timeout" if entry["returncode"] is None
                       else "ok" if entry["returncode"] == 0 else "failed")
    entry["seconds"] = round(time.perf_counter() - started, 1)
    _collect(name, entry, out_dir, started_wall)
    return entry


def run_in_one_process(scripts: list[tuple[str, Path]], out_dir: Path,
                       quick: bool) -> dict[str, dict[str, Any]]:
    """Run ``scripts`` one after the other in one process (``_one_process.py``): the
    scripts of a quick run, whose Spark ones then start one JVM between them. Each gets
    an entry as from :func:`run_script`; the group has the time of all of them."""
    entries: dict[str, dict[str, Any]] = {}
    spec = []
    for name, path in scripts:
        extra = script_args(path, quick)
        if extra is None:
            print(f"\n=== {name}: no quick form, left out of the quick run", flush=True)
            entries[name] = {"status": "skipped",
                             "reason": "no --quick option and no reduced sizes known"}
            continue
        spec.append((name, str(path), extra))
        entries[name] = {"command": _command(name, path, extra)[1], "shared_process": True}
    if not spec:
        return entries
    started_wall = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-status-") as tmp:
        status_path = Path(tmp) / "status.json"
        process = subprocess.Popen(
            [sys.executable, str(Path(spec[0][1]).parent / "_one_process.py"), str(status_path),
             json.dumps(spec)], cwd=ROOT, env=_env(), start_new_session=True)
        _wait(process, TIMEOUT_S[quick] * len(spec))
        statuses = json.loads(status_path.read_text()) if status_path.exists() else {}
    for name, _, _ in spec:
        entry = entries[name]
        entry.update(statuses.get(name, {"status": "timeout", "returncode": None, "seconds": 0}))
        _collect(name, entry, out_dir, started_wall)
    return entries


# --- headline ratios ---------------------------------------------------------------------


def _pick(names: Any, *parts: str, exclude: tuple[str, ...] = ()) -> str | None:
    for name in names:
        if all(p in name for p in parts) and not any(e in name for e in exclude):
            return str(name)
    return None


def _ratio(values: dict[str, float], top: str | None, bottom: str | None) -> float | None:
    if top is None or bottom is None or not values.get(bottom):
        return None
    return values[top] / values[bottom]


def headline(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The key ratios of whatever ran (None where a benchmark or case is missing)."""
    out: dict[str, Any] = {}
    join = results.get("join_throughput", {}).get("median_rows_per_s", {})
    passing = _pick(join, "mapInPandas pass-through")
    full = _pick(join, "full cache", exclude=("pandas",))
    partial = _pick(join, "partial", "warm") or _pick(join, "partial", "100%")
    partial_90 = _pick(join, "partial", "90%")
    broadcast = _pick(join, "broadcast")
    join_rounds = results.get("join_throughput", {}).get(
        "median_per_round_ratio_to_mapInPandas", {})
    out["join_full_cache_vs_mapInPandas"] = _ratio(join, full, passing)
    out["join_full_cache_vs_mapInPandas_per_round"] = join_rounds.get(full)
    out["join_partial_100pct_vs_mapInPandas"] = _ratio(join, partial, passing)
    out["join_partial_90pct_vs_mapInPandas"] = _ratio(join, partial_90, passing)
    out["broadcast_join_vs_join_full_cache"] = _ratio(join, broadcast, full)

    refresh = results.get("refresh_vs_lookup", {})
    view = _pick(refresh.get("median_rows_per_s", {}), "LOCAL")
    if view:
        out["refreshed_view_local_vs_join_full_cache"] = refresh["ratio_to_lookup_join"][view]
        out["refreshed_view_local_vs_join_full_cache_per_round"] = refresh.get(
            "median_per_round_ratio_to_lookup_join", {}).get(view)

    point_in_time = results.get("point_in_time", {})
    pit_ratios = point_in_time.get("ratios", {})
    for kind in ("full", "partial"):
        out[f"point_in_time_{kind}_as_of_vs_plain"] = pit_ratios.get(
            f"{kind}_as_of_vs_{kind}_plain")
        out[f"point_in_time_{kind}_as_of_vs_plain_per_round"] = pit_ratios.get(
            f"{kind}_as_of_vs_{kind}_plain_per_round")
    delta = point_in_time.get("delta_history") or {}
    out["delta_history_reload_reads_only_its_commit"] = delta.get(
        "every_reload_read_only_its_commit")
    out["delta_history_reload_seconds"] = delta.get("median_reload_seconds")

    naive = results.get("naive_vs_lookup", {}).get("results", {})
    rates = {name: case["rows_per_second"] for name, case in naive.items()}
    for source, label in (("PostgreSQL", "pg"), ("Redis", "redis")):
        base = _pick(rates, "naive udf", source)
        for phase in ("warm", "cold"):
            ours = _pick(rates, "lookup_join", source, phase)
            key = f"lookup_join_{label}_{phase}_vs_naive_udf_{label}"
            out[key] = _ratio(rates, ours, base)
            if ours is not None and base is not None:
                # Same-round ratios: both ran in the same round, under the same load.
                out[key + "_per_round"] = statistics.median(
                    b / o for b, o in zip(naive[base]["seconds"], naive[ours]["seconds"],
                                          strict=True))
            if phase == "cold" and ours is not None:
                out[f"lookup_join_{label}_cold_hit_ratio"] = naive[ours].get("hit_ratio")
    out["naive_pandas_udf_pg_vs_naive_udf_pg"] = _ratio(
        rates, _pick(rates, "naive pandas_udf"), _pick(rates, "naive udf", "PostgreSQL"))

    ops = results.get("cache_ops", {}).get("median_ops_per_s", {})
    out["default_cache_get_vs_ttlcache_get"] = _ratio(ops, _pick(ops, "get_if_present"),
                                                      _pick(ops, "TTLCache get"))
    out["default_cache_get_all_vs_ttlcache_get"] = _ratio(ops, _pick(ops, "get_all"),
                                                          _pick(ops, "TTLCache get"))
    out["default_cache_put_vs_ttlcache_set"] = _ratio(
        ops, _pick(ops, "DefaultLookupCache put", exclude=("put_all",)),
        _pick(ops, "TTLCache set"))
    out["default_cache_put_all_vs_ttlcache_set"] = _ratio(ops, _pick(ops, "put_all"),
                                                          _pick(ops, "TTLCache set"))

    scan = results.get("scan_full_load", {}).get("results", {})
    scan_rates = {name: case["rows_per_second"] for name, case in scan.items()}
    select = _pick(scan_rates, "select *", exclude=("binary", "arrow"))
    for case, key in (("read_arrow p=4", "read_arrow_p4"), ("run() p=4", "run_p4"),
                      ("read_arrow p=1", "read_arrow_p1")):
        name = _pick(scan_rates, case)
        out[f"scan_{key}_vs_select_star"] = _ratio(scan_rates, name, select)
        if name:
            out[f"scan_{key}_vs_select_star_per_round"] = scan[name].get(
                "median_same_round_ratio_to_select_star")

    files = results.get("scan_file_load", {}).get("results", {})
    for case, key in (("read_arrow p=1", "p1"), ("read_arrow p=4", "p4")):
        if case in files:
            out[f"scan_file_read_arrow_{key}_vs_read_table"] = files[case][
                "relative_to_read_table"]
            out[f"scan_file_read_arrow_{key}_vs_read_table_per_round"] = files[case][
                "median_same_round_ratio_to_read_table"]

    pruning = results.get("file_source_pruning", {}).get("results", {})
    plain, filtered = pruning.get("FileSource"), pruning.get("FileSource + filter")
    if plain and filtered:
        out["file_source_filter_bytes_read_vs_plain"] = (
            filtered["median_bytes_read"] / plain["median_bytes_read"])
        out["file_source_plain_vs_read_table"] = plain["relative_to_read_table"]
        out["file_source_plain_vs_read_table_per_round"] = plain[
            "median_same_round_ratio_to_read_table"]

    batch = results.get("lookup_batch_pg", {}).get("results", {})
    batch_rates = {name: case["keys_per_second"] for name, case in batch.items()}
    per_key = _pick(batch_rates, "one query per key")
    for case, key in (("100% hits", "100pct_hits"), ("10% hits", "10pct_hits"),
                      ("no cache", "no_cache")):
        name = _pick(batch_rates, case)
        out[f"lookup_batch_{key}_vs_query_per_key"] = _ratio(batch_rates, name, per_key)
        if name:
            out[f"lookup_batch_{key}_vs_query_per_key_per_round"] = batch[name].get(
                "relative_to_one_query_per_key_median_of_rounds")

    memory = results.get("cache_memory", {}).get("results", [])
    if memory:
        largest = memory[-1]
        n = largest["rows"]
        out["memory_rows"] = n
        for kind in ("arrow", "cache_arrow", "cache_put_all", "snapshot"):
            out[f"{kind}_bytes_per_row"] = largest[kind]["bytes"] / n
            out[f"{kind}_measured_bytes_per_row"] = largest[kind]["measured_bytes"] / n
        out["cache_bytes_vs_arrow"] = largest["cache_arrow"]["over_arrow"]
        out["cache_measured_bytes_vs_arrow"] = largest["cache_arrow"]["measured_over_arrow"]

    churn = results.get("worker_churn", {}).get("results", [])
    for mode in churn:
        out[f"worker_churn_full_scans_{mode.get('mode')}"] = mode.get("full_scans")
    return out


# --- plot --------------------------------------------------------------------------------


Bar = tuple[str, float, str, str]  # label, rows/s, kind, ratio text


def _bars(results: dict[str, dict[str, Any]]) -> list[tuple[str, list[Bar]]]:
    """(panel title, bars) of the main comparison, one panel per benchmark that ran."""
    panels = []
    join = results.get("join_throughput")
    if join:
        rates = join["median_rows_per_s"]
        args = join.get("args", {})
        base = _pick(rates, "mapInPandas pass-through")
        bars = []
        for name, rate in rates.items():
            label = name.split(". ", 1)[-1]
            kind = ("ref" if "pass-through" in name or "broadcast" in name else "ours")
            ratio = f"  {rate / rates[base]:.2f}x mapInPandas" if base else ""
            bars.append((label, rate, kind, ratio))
        panels.append((f"join_throughput.py: {args.get('rows', 0):,} rows, "
                       f"{args.get('keys', 0):,} keys, local[2] (in-memory / SQLite dimension)",
                       bars))
    naive = results.get("naive_vs_lookup")
    if naive:
        cases = naive["results"]
        bars = []
        for name, case in cases.items():
            label = name
            if case.get("hit_ratio") is not None:
                label += f" ({case['hit_ratio']:.0%} hits)"
            kind = "naive" if name.startswith("naive") else (
                "ref" if "pass-through" in name else "ours")
            source = "Redis" if "Redis" in name else "PostgreSQL"
            base = _pick(cases, "naive udf", source)
            ratio = ""
            if base and kind != "ref" and base != name:
                ratio = (f"  {case['rows_per_second'] / cases[base]['rows_per_second']:.1f}x "
                         f"naive udf {source}")
            bars.append((label, case["rows_per_second"], kind, ratio))
        joined = naive.get("join_rows", naive["rows"])
        panels.append((f"naive_vs_lookup.py: {naive['rows']:,} rows (naive), {joined:,} "
                       f"(lookup_join), {naive['keys']:,} keys, "
                       "local[2] (PostgreSQL / Redis on loopback)", bars))
    return panels


def plot(results: dict[str, dict[str, Any]], path: Path, subtitle: str) -> bool:
    panels = _bars(results)
    if not panels:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"ours": "#1f77b4", "ref": "#9e9e9e", "naive": "#d62728"}
    heights = [len(bars) for _, bars in panels]
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 1.2 + 0.45 * sum(heights) + 0.9 *
                                                      len(panels)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    top = max(bar[1] for _, bars in panels for bar in bars)
    bottom = min(bar[1] for _, bars in panels for bar in bars)
    for ax, (title, bars) in zip(axes[:, 0], panels, strict=True):
        shown = bars[::-1]  # first case on top
        ax.barh([b[0] for b in shown], [b[1] for b in shown],
                color=[colors[b[2]] for b in shown])
        ax.set_xscale("log")
        ax.set_xlim(bottom / 2, top * 8)  # one scale for all panels, room for the text
        for y, (_, rate, _, ratio) in enumerate(shown):
            ax.text(rate * 1.05, y, f"{rate:,.0f}{ratio}", va="center", fontsize=8)
        ax.set_title(title, fontsize=9, loc="left")
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[-1, 0].set_xlabel("rows/s (median of interleaved runs; log scale)")
    fig.suptitle("spark-lookup: lookup_join throughput against the alternatives\n" + subtitle,
                 fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.legend(handles, ["spark-lookup", "reference (no lookup / JVM join)", "naive per-row UDF"],
               loc="lower right", fontsize=8, ncol=3)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def destinations(out: Path | None, quick: bool) -> tuple[Path, Path]:
    """Where a run writes its summary.json (the directory) and its plot, and so where
    ``--replot`` reads and redraws them."""
    if out is not None:
        return out.resolve(), out.resolve() / "plot.png"
    if quick:
        return HERE / "out" / "quick", HERE / "out" / "quick" / "plot.png"
    return HERE / "out", HERE / "plot.png"


def replot(summary_dir: Path, plot_path: Path) -> None:
    """Recompute the headline ratios of ``summary_dir/summary.json`` and redraw its plot.

    Raises
    ------
    SystemExit
        When there is no readable summary there (e.g. nothing has run yet).
    """
    path = summary_dir / "summary.json"
    if not path.is_file():
        raise SystemExit(
            f"--replot: no results at {path}; run benchmarks/run_all.py first (with the "
            "same --out or --quick), or give --out the directory of an earlier run's "
            "summary.json")
    try:
        summary = json.loads(path.read_text())
        results = {name: entry["result"] for name, entry in summary["benchmarks"].items()
                   if "result" in entry}
        subtitle = summary.get("plot_subtitle")
        if not subtitle:
            load = summary["load_average"]
            subtitle = (
                f"{summary['started_at'][:10]}, {summary['machine']['cpus']} CPUs "
                f"({summary['machine']['cpu_model']}), load average {load['before'][0]:.1f} / "
                f"{load['after'][0]:.1f}")
    except (OSError, ValueError, LookupError, TypeError, AttributeError) as exc:
        raise SystemExit(f"--replot: {path} is no summary of run_all.py ({exc!r})") from exc
    summary["headline"] = headline(results)
    summary["plot_subtitle"] = subtitle
    plotted = plot(results, plot_path, subtitle)
    summary["plot"] = str(plot_path) if plotted else None
    path.write_text(json.dumps(summary, indent=2, default=str))
    print(f"rewrote {path}" + (f" and {plot_path}" if plotted else " (nothing to plot)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the reduced form CI runs")
    parser.add_argument("--out", type=Path,
                        help="where the summary and the plot go (and where --replot reads "
                             "them); default benchmarks/out and benchmarks/plot.png, "
                             "benchmarks/out/quick for --quick")
    parser.add_argument("--only", help="comma-separated script names (default: all present)")
    parser.add_argument("--replot", action="store_true",
                        help="run nothing: recompute the headline ratios of the summary.json "
                             "of an earlier run (the one --out or --quick names) from its "
                             "results, redraw its plot")
    args = parser.parse_args()
    summary_dir, plot_path = destinations(args.out, args.quick)
    if args.replot:
        replot(summary_dir, plot_path)
        return
    wanted = args.only.split(",") if args.only else list(SCRIPTS)
    unknown = [name for name in wanted if name not in SCRIPTS]
    if unknown:
        raise SystemExit(f"--only: unknown {unknown}; known: {', '.join(SCRIPTS)}")

    started = time.perf_counter()
    started_at = dt.datetime.now(dt.timezone.utc)
    load_before = os.getloadavg()
    workdir: Path | None = None
    if args.quick:
        workdir = Path(tempfile.mkdtemp(prefix="bench-quick-"))
        shutil.copytree(HERE, workdir / "benchmarks",
                        ignore=shutil.ignore_patterns("out", "__pycache__", "*.png"))
        scripts_dir = workdir / "benchmarks"
    else:
        scripts_dir = HERE
    out_dir = scripts_dir / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    summary_dir.mkdir(parents=True, exist_ok=True)

    entries: dict[str, dict[str, Any]] = {}
    try:
        shared: list[tuple[str, Path]] = []
        for name in wanted:
            path = scripts_dir / f"{name}.py"
            if not path.exists():
                if name in REQUIRED:
                    entries[name] = {"status": "missing"}
                continue
            if args.quick:  # smoke figures: nothing to measure apart
                shared.append((name, path))
                entries[name] = {}  # keeps the run order in the summary
                continue
            entries[name] = run_script(name, path, out_dir, args.quick)
        entries.update(run_in_one_process(shared, out_dir, args.quick))
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    load_after = os.getloadavg()
    seconds = time.perf_counter() - started

    results = {name: entry["result"] for name, entry in entries.items() if "result" in entry}
    ratios = headline(results)
    machine = {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }
    subtitle = (f"{started_at:%Y-%m-%d}, {machine['cpus']} CPUs ({machine['cpu_model']}), "
                f"load average {load_before[0]:.1f} / {load_after[0]:.1f}"
                + (", --quick" if args.quick else ""))
    plotted = plot(results, plot_path, subtitle)
    summary = {
        "quick": args.quick,
        "command": " ".join([".venv/bin/python", "benchmarks/run_all.py", *sys.argv[1:]]),
        "started_at": started_at.isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "machine": machine,
        "load_average": {"before": load_before, "after": load_after},
        "headline": ratios,
        "plot": str(plot_path) if plotted else None,
        "plot_subtitle": subtitle,
        "benchmarks": entries,
    }
    summary_path = summary_dir / "summary.json"
    summary_path.write_text(json.dumps(summary, indent=2, default=str))

    print(f"\n{'benchmark':20}{'status':>10}{'seconds':>9}")
    for name, entry in entries.items():
        print(f"{name:20}{entry['status']:>10}{entry.get('seconds', 0):>9.0f}")
    print("\nheadline ratios:")
    for key, value in ratios.items():
        if value is not None:
            print(f"  {key:48} {value:,.2f}")
    print(f"\n{seconds:.0f} s in all; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after; wrote {summary_path}"
          + (f" and {plot_path}" if plotted else " (nothing to plot)"))
    failed = [name for name, entry in entries.items() if entry["status"] not in ("ok", "skipped")]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
