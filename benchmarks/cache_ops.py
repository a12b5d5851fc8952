"""DefaultLookupCache get/put operations per second next to a raw cachetools.TTLCache.

Both hold the same rows, see the same key sequence (80% of gets on present keys), and
run interleaved in one process; the figure is the median of the repetitions. The raw
TTLCache has no lock, no metrics, no validation: the ratio is the price of those.

    .venv/bin/python benchmarks/cache_ops.py [--ops 200000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from cachetools import TTLCache

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import interleaved, median, write_result
from cache import DefaultLookupCache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ops", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    rng = random.Random(7)
    present = [(i,) for i in range(args.keys)]
    absent = [(args.keys + i,) for i in range(args.keys)]
    rows = {key: ((key[0], f"name-{key[0]}", key[0] * 1.5),) for key in present}
    gets = [rng.choice(present) if rng.random() < 0.8 else rng.choice(absent)
            for _ in range(args.ops)]
    puts = [rng.choice(present) for _ in range(args.ops)]

    ours = (DefaultLookupCache.new_builder().maximum_size(args.keys * 2)
            .expire_after_write(3600).build())
    ours.open()
    raw: TTLCache[tuple[int], tuple[tuple[object, ...], ...]] = TTLCache(args.keys * 2, 3600)
    ours_batched = (DefaultLookupCache.new_builder().maximum_size(args.keys * 2)
                    .expire_after_write(3600).build())
    ours_batched.open()
    for key, value in rows.items():
        ours.put(key, value)
        raw[key] = value
        ours_batched.put(key, value)

    def ours_get() -> int:
        get = ours.get_if_present
        for key in gets:
            get(key)
        return len(gets)

    def raw_get() -> int:
        get = raw.get
        for key in gets:
            get(key)
        return len(gets)

    def ours_get_all() -> int:
        chunk = 1000
        for i in range(0, len(gets), chunk):
            ours_batched.get_all(gets[i:i + chunk])
        return len(gets)

    def ours_put() -> int:
        put = ours.put
        for key in puts:
            put(key, rows[key])
        return len(puts)

    def raw_put() -> int:
        for key in puts:
            raw[key] = rows[key]
        return len(puts)

    def ours_put_all() -> int:
        chunk = 1000
        for i in range(0, len(puts), chunk):
            ours_batched.put_all({key: rows[key] for key in puts[i:i + chunk]})
        return len(puts)

    rates = interleaved(
        {
            "TTLCache get": raw_get,
            "DefaultLookupCache get_if_present": ours_get,
            "DefaultLookupCache get_all (1000/batch)": ours_get_all,
            "TTLCache set": raw_put,
            "DefaultLookupCache put": ours_put,
            "DefaultLookupCache put_all (1000/batch)": ours_put_all,
        },
        args.repeats,
    )
    medians = {name: median(values) for name, values in rates.items()}
    print(f"{'case':45} {'ops/s (median)':>16} {'vs raw':>8}")
    for name, rate in medians.items():
        base = medians["TTLCache get"] if "get" in name else medians["TTLCache set"]
        print(f"{name:45} {rate:16,.0f} {rate / base:8.2f}")
    path = write_result("cache_ops", {"args": vars(args), "ops_per_s": rates,
                                      "median_ops_per_s": medians})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
