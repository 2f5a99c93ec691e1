"""What knowing the caller costs: describe under load with authentication off, with an API
key, with an OIDC token (JWT), and with table-scoped STS credentials vended from a warm cache,
side by side in one run.

Two groups, because a describe on S3 waits for the store and would hide the cost of the
checks themselves:
  - local warehouse: anonymous (no authentication, no grants) / API key + grants /
    JWT + grants / API key + grants with metrics served / API key + 1 000 grants (the cost
    of a larger grants file);
  - SeaweedFS warehouse (on loopback): API key, nothing vended / API key, `static` keys
    vended / API key, `sts` keys vended from the cache (the first describe fills it, the
    load then measures the warm path the target is about).

Each configuration runs twice, the rounds in opposite orders, and the table shows the means
and each one's throughput relative to the first of its group. The load is `wrk -t2 -c16` on
one table. Timings vary with the machine's load: a script to read, not a test to pass.
Usage: python bench/auth.py [--seconds 10]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "interop"))

import boto3  # noqa: E402

import seaweedfs  # noqa: E402
from conftest import free_port, start_gateway  # noqa: E402
from security import Issuer, call, enc, make_key, write  # noqa: E402
from metadata import parse_latency  # noqa: E402

TABLE = ["bench", "t"]


def grants(principal: str, extra: int = 0, base: list[str] | None = None) -> str:
    base = base or []
    rules = [f'[[grant]]\nprincipal = "admin"\nid = {json.dumps(base)}\naccess = "admin"\n',
             f'[[grant]]\nprincipal = "{principal}"\nid = {json.dumps(base + TABLE)}\naccess = "read"\n']
    # Grants for other principals and other tables: evaluated, never matching.
    rules += [f'[[grant]]\nprincipal = "user{i}"\nid = {json.dumps(base + ["bench", f"t{i}"])}\naccess = "write"\n'
              for i in range(extra)]
    return "\n".join(rules)


def wrk_describe(wrk: str, uri: str, table: list[str], headers: dict, seconds: int) -> dict:
    lua = os.path.join(tempfile.mkdtemp(prefix="bench-auth-"), "describe.lua")
    with open(lua, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        for name, value in headers.items():
            f.write(f'wrk.headers["{name}"] = "{value}"\n')
        f.write(f"wrk.body = '{json.dumps({'id': table})}'\n")
    out = subprocess.run(
        [wrk, "-t2", "-c16", f"-d{seconds}s", "--latency", "-s", lua, f"{uri}/v1/table/{enc(table)}/describe"],
        capture_output=True, text=True, check=True,
    ).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"{errors.group(1)} failed describes under load:\n{out}")
    return {"req/s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50 (ms)": parse_latency(out, "50%"), "p99 (ms)": parse_latency(out, "99%")}


def run_config(name: str, setup, wrk: str, seconds: int) -> dict:
    """`setup()` starts a gateway and returns (gateway, admin headers, caller headers, table id,
    a check of one describe's answer)."""
    gw, admin, caller, table, check = setup()
    try:
        ns = table[:-1]
        for i in range(1, len(ns) + 1):
            status, body, _ = call(gw.uri, "POST", f"/v1/namespace/{enc(ns[:i])}/create",
                                   {"mode": "exist_ok"}, admin)
            assert status == 200, (name, body)
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(table)}/declare", {}, admin)
        assert status == 200, (name, body)
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(table)}/describe", {}, caller)
        assert status == 200, (name, body)
        check(body)
        print(f"  {name} ...", file=sys.stderr, flush=True)
        return wrk_describe(wrk, gw.uri, table, caller, seconds)
    finally:
        assert gw.stop() == 0, f"{name}: the gateway did not stop cleanly; see {gw.log}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    args = ap.parse_args()
    wrk = shutil.which("wrk")
    if not wrk:
        sys.exit("wrk not found: run bench/run (it installs wrk)")
    os.environ["RUST_LOG"] = "warn"
    work = tempfile.mkdtemp(prefix="bench-auth-")
    admin_key, admin_line = make_key("admin")
    reader_key, reader_line = make_key("reader")
    keys_file = os.path.join(work, "keys")
    write(keys_file, f"{admin_line}\n{reader_line}\n")
    issuer = Issuer()
    sw = seaweedfs.start(os.path.join(work, "weed.log"))
    try:
        local = local_configs(work, keys_file, admin_key, reader_key, issuer)
        s3 = s3_configs(work, sw, keys_file, admin_key, reader_key)
        report("local warehouse", measure(local, wrk, args.seconds))
        report("SeaweedFS warehouse", measure(s3, wrk, args.seconds))
    finally:
        sw.stop()
        issuer.stop()
        shutil.rmtree(work, ignore_errors=True)


def measure(configs: dict, wrk: str, seconds: int) -> dict:
    runs = {name: [] for name in configs}
    for order in (list(configs), list(configs)[::-1]):
        for name in order:
            runs[name].append(run_config(name, configs[name], wrk, seconds))
    return {name: {m: sum(r[m] for r in rs) / len(rs) for m in rs[0]} for name, rs in runs.items()}


def report(title: str, rows: dict):
    base = next(iter(rows.values()))["req/s"]
    print(f"\n{title}: describe under load, wrk -t2 -c16, mean of two rounds")
    print(f"{'configuration':40} {'req/s':>9} {'vs first':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for name, r in rows.items():
        print(f"{name:40} {r['req/s']:9.0f} {r['req/s'] / base:8.1%} {r['p50 (ms)']:8.2f} {r['p99 (ms)']:8.2f}")


def no_keys(body):
    assert "aws_access_key_id" not in body.get("storage_options", {}), body


def local_configs(work, keys_file, admin_key, reader_key, issuer) -> dict:
    def gateway(extra_args, tag):
        root = os.path.join(work, f"wh-{tag}-{uuid.uuid4().hex[:6]}")
        return start_gateway(["--warehouse", root, *extra_args])

    def grants_file(extra):
        path = os.path.join(work, f"grants-{extra}.toml")
        write(path, grants("reader", extra))
        return path

    jwt_admin = {"authorization": f"Bearer {issuer.token(sub='admin', lifetime=3600)}"}
    jwt_reader = {"authorization": f"Bearer {issuer.token(sub='reader', lifetime=3600)}"}
    key_admin, key_reader = {"x-api-key": admin_key}, {"x-api-key": reader_key}
    oidc = ["--oidc-issuer", issuer.url, "--oidc-audience", "lance-gateway"]
    return {
        "anonymous (authentication off)": lambda: (
            gateway([], "anon"), {}, {}, TABLE, no_keys),
        "API key + grants": lambda: (
            gateway(["--api-keys", keys_file, "--grants", grants_file(0)], "key"), key_admin, key_reader, TABLE,
            no_keys),
        "JWT (RS256) + grants": lambda: (
            gateway([*oidc, "--grants", grants_file(0)], "jwt"), jwt_admin, jwt_reader, TABLE, no_keys),
        "API key + grants, metrics on": lambda: (
            gateway(["--api-keys", keys_file, "--grants", grants_file(0), "--metrics-listen",
                     f"127.0.0.1:{free_port()}"], "keym"), key_admin, key_reader, TABLE, no_keys),
        "API key + 1 000 grants": lambda: (
            gateway(["--api-keys", keys_file, "--grants", grants_file(1000)], "key1k"), key_admin, key_reader, TABLE,
            no_keys),
    }


def s3_configs(work, sw, keys_file, admin_key, reader_key) -> dict:
    bucket = f"bench-auth-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=sw.endpoint, region_name="us-east-1", aws_access_key_id=seaweedfs.ADMIN_KEY,
                 aws_secret_access_key=seaweedfs.ADMIN_SECRET).create_bucket(Bucket=bucket)
    path = os.path.join(work, "grants-s3.toml")
    write(path, grants("reader"))
    env = {"AWS_ACCESS_KEY_ID": seaweedfs.ADMIN_KEY, "AWS_SECRET_ACCESS_KEY": seaweedfs.ADMIN_SECRET}
    common = ["--s3-endpoint", sw.endpoint, "--s3-region", "us-east-1", "--api-keys", keys_file, "--grants", path]
    key_admin, key_reader = {"x-api-key": admin_key}, {"x-api-key": reader_key}

    def gateway(credentials):
        warehouse = f"s3://{bucket}/{credentials}-{uuid.uuid4().hex[:6]}"
        extra = {"none": [],
                 "static": ["--client-access-key-id", seaweedfs.CLIENT_KEY,
                            "--client-secret-access-key", seaweedfs.CLIENT_SECRET],
                 "sts": ["--sts-role-arn", seaweedfs.STS_ROLE_ARN, "--sts-duration-secs", "3600"]}[credentials]
        return start_gateway(["--warehouse", warehouse, *common, "--credentials", credentials, *extra], env)

    def has_key(prefix_check):
        def check(body):
            opts = body.get("storage_options", {})
            assert "aws_access_key_id" in opts, body
            prefix_check(opts)
        return check

    return {
        "API key, nothing vended": lambda: (gateway("none"), key_admin, key_reader, TABLE, no_keys),
        "API key, static keys vended": lambda: (
            gateway("static"), key_admin, key_reader, TABLE,
            has_key(lambda o: o["aws_access_key_id"] == seaweedfs.CLIENT_KEY)),
        "API key, STS keys vended (warm cache)": lambda: (
            gateway("sts"), key_admin, key_reader, TABLE,
            has_key(lambda o: o["aws_session_token"] and int(o["expires_at_millis"]) > 0)),
    }


if __name__ == "__main__":
    main()
