"""One place the benchmarks write their ratios to, for bench/guard's table.

Each benchmark takes `--ratios FILE` and appends a JSON line per figure it compares:
the benchmark, the metric, our figure, the other side's, and which side it is compared
against. bench/guard gathers them into one table."""

import json


def record(path, bench, metric, ours, theirs, against):
    """Appends one compared figure to `path` (nothing when `path` is None)."""
    if not path:
        return
    ratio = ours / theirs if theirs else None
    with open(path, "a") as f:
        f.write(json.dumps({"bench": bench, "metric": metric, "ours": ours, "theirs": theirs,
                            "against": against, "ratio": ratio}) + "\n")
