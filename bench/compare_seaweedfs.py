"""lance-gateway side by side with SeaweedFS's built-in Lance catalog, on one SeaweedFS.

SeaweedFS runs with open access (no identities), as its own client suites run it; the
gateway serves the same SeaweedFS in endpoint mode. For each catalog this runs:
  - the Spark scenario of tests/interop/test_spark.py (storage.* keys given to Spark for
    SeaweedFS, which vends no keys; nothing for the gateway, which vends them),
  - the LanceDB scenario of tests/interop/test_lancedb.py,
  - the metadata benchmark of bench/metadata.py,
and prints how far each scenario got and the benchmark ratios (gateway / SeaweedFS).
With `--against BIN` (main's binary), a second gateway on the same SeaweedFS goes through
the benchmark too, first, so a change is measured against main and SeaweedFS in one run.
Usage: python bench/compare_seaweedfs.py [--tables 500] [--seconds 10] [--against BIN]
"""

import argparse
import os
import shutil
import sys
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))
sys.path.insert(0, HERE)

import metadata  # noqa: E402
import ratios  # noqa: E402
import seaweedfs  # noqa: E402
from conftest import start_gateway  # noqa: E402

KEYS = {"AWS_ACCESS_KEY_ID": "any", "AWS_SECRET_ACCESS_KEY": "anysecret", "AWS_REGION": "us-east-1"}


class Attached:
    """A server this script did not start (SeaweedFS's catalog lives inside weed)."""

    def __init__(self, name, port):
        self.name, self.port, self.proc = name, port, None


def run_scenario(label, fn):
    reached = []
    try:
        fn(lambda name: reached.append(name))
        return "passes every step"
    except Exception as e:  # report where it stopped, keep going
        first_line = str(e).strip().splitlines()[0][:240] if str(e).strip() else type(e).__name__
        where = reached[-1] if reached else "setup"
        print(f"[{label}] stopped at '{where}': {first_line}", flush=True)
        traceback.print_exc(limit=2)
        return f"stops at '{where}': {first_line}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tables", type=int, default=500)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--ratios", help="append the ratios to this file, as JSON lines (bench/guard)")
    ap.add_argument("--against", help="main's binary, benchmarked on the same SeaweedFS in the same run")
    args = ap.parse_args()
    os.environ.update(KEYS)
    sw = seaweedfs.start(open_access=True)
    gateway_args = ["--warehouse", "s3://", "--s3-endpoint", sw.endpoint, "--s3-region", "us-east-1"]
    gateway_env = {**KEYS, "LANCE_GATEWAY_CREDENTIALS": "static", "LANCE_GATEWAY_CLIENT_ACCESS_KEY_ID": "any",
                   "LANCE_GATEWAY_CLIENT_SECRET_ACCESS_KEY": "anysecret", "RUST_LOG": "warn"}
    gw = start_gateway(gateway_args, gateway_env)
    main_gw = None
    if args.against:
        built = os.environ.get("LANCE_GATEWAY_BIN")
        os.environ["LANCE_GATEWAY_BIN"] = args.against
        try:
            main_gw = start_gateway(gateway_args, gateway_env)
        finally:
            if built is None:
                os.environ.pop("LANCE_GATEWAY_BIN")
            else:
                os.environ["LANCE_GATEWAY_BIN"] = built
    storage = {"aws_endpoint": sw.endpoint, "aws_region": "us-east-1", "allow_http": "true",
               "aws_access_key_id": "any", "aws_secret_access_key": "anysecret",
               "aws_virtual_hosted_style_request": "false"}
    catalogs = {"lance-gateway": gw.uri, "SeaweedFS built-in": sw.lance_uri}
    results = {}
    try:
        import lance_namespace as ln
        from test_lancedb import lancedb_scenario

        for name, uri in catalogs.items():
            bucket = f"cmp-{uuid.uuid4().hex[:8]}"
            ln.connect("rest", {"uri": uri}).create_namespace(ln.CreateNamespaceRequest(id=[bucket]))
            results[(name, "LanceDB")] = run_scenario(
                f"{name} LanceDB", lambda step: lancedb_scenario(uri, [bucket], storage, step)
            )
            if not args.skip_spark:
                from test_spark import scenario, spark_session

                spark_bucket = f"cmps-{uuid.uuid4().hex[:8]}"
                spark = spark_session(uri, None if name == "lance-gateway" else storage)
                try:
                    results[(name, "Spark")] = run_scenario(
                        f"{name} Spark", lambda step: (step("scenario"), scenario(spark, uri, [spark_bucket], storage, name))
                    )
                finally:
                    spark.stop()

        wrk = shutil.which("wrk")
        bench = {}
        benched = ({"main": main_gw.uri} if main_gw else {}) | catalogs
        for name, uri in benched.items():
            port = int(uri.rsplit(":", 1)[1])
            bucket = f"bench-{uuid.uuid4().hex[:8]}"
            ln.connect("rest", {"uri": uri}).create_namespace(ln.CreateNamespaceRequest(id=[bucket]))
            try:
                bench[name] = metadata.bench_server(Attached(name, port), args.tables, args.seconds, wrk, [bucket])
            except Exception as e:
                bench[name] = {"error": str(e)[:200]}
    finally:
        gw.stop()
        if main_gw:
            main_gw.stop()
        sw.stop()

    print("\nScenarios:")
    for (name, what), outcome in results.items():
        print(f"  {name:20} {what:8} {outcome}")
    print(f"\nMetadata benchmark on SeaweedFS, {args.tables} tables, wrk -t2 -c16 -d{args.seconds}s")
    gwb, swb = bench.get("lance-gateway", {}), bench.get("SeaweedFS built-in", {})
    mainb = bench.get("main", {})
    for name, figures in bench.items():
        if "error" in figures:
            print(f"{name}: the benchmark failed: {figures['error']}")
    gwb = {k: v for k, v in gwb.items() if k != "error"}
    against_main = f" {'main':>10} {'vs main':>7}" if main_gw else ""
    print(f"{'metric':34} {'gateway':>10} {'SeaweedFS':>10} {'ratio':>7}{against_main}")
    for metric in gwb:
        if metric in swb and isinstance(swb[metric], float):
            ratio = gwb[metric] / swb[metric] if swb[metric] else float("inf")
            line = f"{metric:34} {gwb[metric]:10.2f} {swb[metric]:10.2f} {ratio:6.2f}x"
            ratios.record(args.ratios, "metadata, SeaweedFS", metric, gwb[metric], swb[metric], "SeaweedFS built-in")
        else:
            line = f"{metric:34} {gwb[metric]:10.2f} {str(swb.get('error', '-'))[:60]}"
        if isinstance(mainb.get(metric), float):
            to_main = gwb[metric] / mainb[metric] if mainb[metric] else float("inf")
            line += f" {mainb[metric]:10.2f} {to_main:6.2f}x"
            ratios.record(args.ratios, "metadata, SeaweedFS", metric, gwb[metric], mainb[metric], "main")
        print(line)


if __name__ == "__main__":
    main()
