"""The ratio table of bench/guard, in Markdown, from the JSON lines the benchmarks wrote."""

import datetime
import json
import sys

# Figures where less is better: for them the table's `better` column is theirs / ours. Units
# in brackets (the metadata benches), in a suffix (scale.py's names), and every far-store
# row but a throughput (far.py names an operation, and times its p50 in ms).
LOWER_IS_BETTER = ("(ms)", "(s)", "(MiB)", "_s", "_ms", "_mib")


def lower_is_better(bench: str, metric: str) -> bool:
    if bench.startswith("far store"):
        return "req/s" not in metric
    return metric.endswith(LOWER_IS_BETTER) and not metric.endswith("_per_s")


def main():
    path, commit, against = sys.argv[1], sys.argv[2], sys.argv[3]
    rows = [json.loads(line) for line in open(path) if line.strip()]
    print(f"Benchmarks of {commit} on {datetime.date.today()} (main's binary: {against}); "
          "`ratio` is ours / theirs, `better` is how many times better ours is (above 1: ours wins).\n")
    print("| benchmark | metric | against | ours | theirs | ratio | better |")
    print("|---|---|---|---:|---:|---:|---:|")
    for r in rows:
        ratio = r["ratio"]
        lower = lower_is_better(r["bench"], r["metric"])
        better = (1 / ratio if lower else ratio) if ratio else None
        fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        print(f"| {r['bench']} | {r['metric']} | {r['against']} | {r['ours']:.2f} | {r['theirs']:.2f} "
              f"| {fmt(ratio)} | {fmt(better)} |")


if __name__ == "__main__":
    main()
