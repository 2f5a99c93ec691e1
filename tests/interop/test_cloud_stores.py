"""Google Cloud Storage and Azure Blob warehouses (`gs://bucket/prefix`, `az://container/prefix`)
on the emulators, fake-gcs-server and Azurite, driven by the real clients with only what the
gateway vends: pylance and LanceDB through the namespace (create, append, read, an IVF_PQ
index, search, versions), managed versioning and a batch commit, the gateway's own data plane
(LanceDB's remote client), maintenance (compaction, index upkeep, cleanup) and `admin fsck`.

On Azurite the vended SAS tokens are checked for real (Azurite verifies their signature,
permissions and container): a read-only token cannot write, and a token for one container
opens nothing in another. fake-gcs-server checks no tokens, so on GCS the options' shape is
what is checked."""

import json
import os
import subprocess
import time
import urllib.parse

import jwt
import lance
import lance_namespace as ln
from cryptography.hazmat.primitives import serialization
import pyarrow as pa
import pytest

import emulators
import test_batch_commit
import test_lancedb
import test_lancedb_remote
import test_managed_versioning
import test_maintenance
import test_pylance
from conftest import Warehouse, cloud_gateway_setup, gateway_binary, start_gateway, unique
from security import call, enc, keyed_gateway

KINDS = ["gcs", "azure"]


@pytest.fixture(scope="module", params=KINDS)
def cloud(request):
    args, env, storage = cloud_gateway_setup(request, request.param)
    gw = start_gateway(args, env)
    yield Warehouse(request.param, gw, [], storage, None, args, env)
    code = gw.stop()
    assert code == 0, open(gw.log).read()[-4000:]


@pytest.fixture(scope="module", params=KINDS)
def keyed(request):
    with keyed_gateway(request, "lg-cloud-") as gw:
        yield gw


@pytest.fixture(scope="module", params=KINDS)
def managed(request):
    with keyed_gateway(request, "lg-cloud-managed-", ("--managed-versioning", "true")) as gw:
        yield gw


def described(uri: str, table_id: list[str], key: str | None = None) -> dict:
    headers = {"x-api-key": key} if key else {}
    status, body, _ = call(uri, "POST", f"/v1/table/{enc(table_id)}/describe", {"id": table_id}, headers)
    assert status == 200, body
    return body


def test_a_location_comes_with_the_options_lance_reads_for_its_cloud(cloud):
    ns = ln.connect("rest", {"uri": cloud.uri})
    top = [unique("opts")]
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    ns.declare_table(ln.DeclareTableRequest(id=top + ["t"]))
    body = described(cloud.uri, top + ["t"])
    opts = body["storage_options"]
    if cloud.kind == "gcs":
        bucket = cloud.args[cloud.args.index("--warehouse") + 1]
        assert body["location"].startswith(f"{bucket}/"), body["location"]
        token = opts.pop("google_storage_token")
        expires = int(opts.pop("expires_at_millis"))
        assert opts == {"google_base_url": cloud.storage_options["google_base_url"], "allow_http": "true"}
        # The gateway's own token: a JWT signed with its service account's key, for GCS.
        with open(cloud.args[cloud.args.index("--gcs-service-account-key") + 1]) as f:
            account = json.load(f)
        public = serialization.load_pem_private_key(account["private_key"].encode(), None).public_key()
        claims = jwt.decode(token, public, algorithms=["RS256"], options={"verify_aud": False})
        assert claims["iss"] == claims["sub"] == account["client_email"]
        assert jwt.get_unverified_header(token)["kid"] == account["private_key_id"]
        now = time.time()
        # Said to last five minutes, well inside the token's own hour.
        assert now * 1000 + 240_000 < expires <= now * 1000 + 300_000 < claims["exp"] * 1000
    else:
        container = cloud.args[cloud.args.index("--warehouse") + 1]
        assert body["location"].startswith(f"{container}/"), body["location"]
        assert opts == {
            "azure_storage_account_name": emulators.AZURE_ACCOUNT,
            "azure_storage_endpoint": cloud.storage_options["azure_storage_endpoint"],
            "allow_http": "true",
            "azure_storage_account_key": emulators.AZURE_KEY,
        }


def test_pylance_creates_appends_and_reads(cloud):
    test_pylance.test_create_append_read(cloud)


def test_lancedb_end_to_end(cloud):
    # No storage options on the client: LanceDB reaches the store with what is vended.
    test_lancedb.lancedb_scenario(cloud.uri, [], cloud.storage_options)


def test_the_gateways_data_plane_serves_the_remote_client(keyed):
    test_lancedb_remote.test_remote_client_end_to_end(keyed)


def test_lancedb_through_a_managed_gateway(managed):
    test_managed_versioning.test_lancedb_through_a_managed_gateway(managed)


def test_concurrent_managed_writers_both_land(managed):
    test_managed_versioning.test_concurrent_writers_both_land(managed)


def test_a_batch_over_three_tables_is_seen_whole(managed):
    test_batch_commit.test_a_batch_over_three_tables_is_seen_whole_by_polling_readers(managed)


def test_maintenance_compacts_keeps_indices_up_and_cleans_up(request, cloud):
    """Compaction, index upkeep and cleanup run by the gateway on a cloud warehouse, and
    every row survives them."""
    args, env, _ = cloud_gateway_setup(request, cloud.kind)
    policy = ["compaction.min_fragments=4", "index.unindexed_rows=1", "cleanup.retention=1s",
              "cleanup.keep_versions=3"]
    gw = start_gateway([*args, *test_maintenance.QUICK, *(a for p in policy for a in ("--maintenance-policy", p))],
                       env)
    try:
        table_id = [unique("maint")]
        for i in range(12):
            test_maintenance.append(gw, table_id, test_maintenance.rows(i * 5, 5),
                                    mode="create" if i == 0 else "append")
        test_maintenance.open_table(gw, table_id).create_scalar_index("id", "BTREE")
        for i in range(12, 16):
            test_maintenance.append(gw, table_id, test_maintenance.rows(i * 5, 5))
        run = test_maintenance.wait_for("a compaction", lambda: test_maintenance.last_run(gw, table_id, "compaction"))
        assert run["outcome"] == "succeeded", run
        upkeep = test_maintenance.wait_for(
            "index upkeep", lambda: test_maintenance.last_run(gw, table_id, "index"))
        assert upkeep["outcome"] == "succeeded", upkeep
        cleaned = test_maintenance.wait_for(
            "a cleanup", lambda: test_maintenance.last_run(gw, table_id, "cleanup"))
        assert cleaned["outcome"] == "succeeded", cleaned
        ds = test_maintenance.open_table(gw, table_id)
        test_maintenance.assert_rows(ds, 80)
        assert len(ds.get_fragments()) <= 4
        assert len(ds.versions()) <= 4, [v["version"] for v in ds.versions()]
        stats = ds.stats.index_stats("id_idx")
        assert stats["num_unindexed_rows"] == 0, stats
    finally:
        assert gw.stop() == 0, open(gw.log).read()[-4000:]


def test_fsck_finds_a_healthy_cloud_warehouse_clean(cloud):
    ns = ln.connect("rest", {"uri": cloud.uri})
    top = [unique("fsck")]
    ns.create_namespace(ln.CreateNamespaceRequest(id=top))
    lance.write_dataset(pa.table({"id": [1, 2, 3]}), namespace_client=ns, table_id=top + ["t"], mode="create")
    out = subprocess.run([gateway_binary(), "admin", "fsck", *cloud.args], capture_output=True, text=True,
                         env={**os.environ, **cloud.env}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "clean" in out.stdout.lower(), out.stdout


# ------------------------------------------------------------------------ SAS on Azurite


@pytest.fixture(scope="module")
def sas(request):
    with keyed_gateway(request, "lg-sas-", ("--credentials", "sas", "--sas-duration-secs", "900"),
                       kind="azure") as gw:
        yield gw


def sas_params(token: str) -> dict:
    return {k: v[0] for k, v in urllib.parse.parse_qs(token).items()}


def test_sas_tokens_follow_the_callers_access_and_azurite_enforces_them(request, sas, azurite):
    uri = sas["gw"].uri
    app = ln.connect("rest", {"uri": uri, "headers.x-api-key": sas["keys"]["app"]})
    table_id = [unique("sas")]
    first = pa.table({"id": pa.array(range(10), pa.int64())})
    # The writer creates and appends with the token the gateway vends, and nothing else.
    lance.write_dataset(first, namespace_client=app, table_id=table_id, mode="create")
    lance.write_dataset(first, namespace_client=app, table_id=table_id, mode="append")

    before = int(time.time() * 1000)
    write = described(uri, table_id, sas["keys"]["app"])
    read = described(uri, table_id, sas["keys"]["viewer"])
    wp, rp = sas_params(write["storage_options"]["azure_storage_sas_token"]), \
        sas_params(read["storage_options"]["azure_storage_sas_token"])
    assert (wp["sp"], rp["sp"]) == ("racwdl", "rl")
    assert wp["sr"] == rp["sr"] == "c", "a flat namespace (Azurite) gets container tokens, as configured"
    assert "azure_storage_account_key" not in read["storage_options"]
    expires = int(read["storage_options"]["expires_at_millis"])
    assert before + 890_000 <= expires <= int(time.time() * 1000) + 900_000

    location = read["location"]
    read_opts = read["storage_options"]
    # The reader's token reads the table...
    assert lance.dataset(location, storage_options=read_opts).count_rows() == 20
    # ...and is refused a write, by Azurite.
    with pytest.raises(Exception, match="(?i)403|permission|authoriz"):
        lance.write_dataset(first, location, mode="append", storage_options=read_opts)
    assert lance.dataset(location, storage_options=write["storage_options"]).count_rows() == 20
    # A token for this container opens nothing in another one.
    other = azurite.create_container()
    with pytest.raises(Exception, match="(?i)403|permission|authoriz"):
        lance.write_dataset(first, f"az://{other}/elsewhere", mode="create",
                            storage_options=write["storage_options"])
    # A key with no grant gets no token at all.
    status, body, _ = call(uri, "POST", f"/v1/table/{enc(table_id)}/describe", {"id": table_id},
                           {"x-api-key": sas["keys"]["nobody"]})
    assert status in (403, 404), body


def test_settings_the_store_refuses_stop_the_start(request, fake_gcs, azurite, tmp_path):
    """A bucket or container that is not there, an account key the store refuses, a key that
    is not a key, a service account file that is not one: one line naming the setting, exit
    status 2, nothing served."""
    azure = ["--azure-account", emulators.AZURE_ACCOUNT, "--azure-endpoint", azurite.endpoint]
    bad_file = tmp_path / "not-a-key.json"
    bad_file.write_text('{"client_email": "x"}')
    cases = {
        "no such container": ["--warehouse", "az://lg-not-there", *azure, "--azure-access-key", emulators.AZURE_KEY],
        "refused key": ["--warehouse", f"az://{azurite.create_container()}", *azure,
                        "--azure-access-key", "d3Jvbmcga2V5"],
        "not a key": ["--warehouse", f"az://{azurite.create_container()}", *azure, "--azure-access-key", "no key!"],
        "no such bucket": ["--warehouse", "gs://lg-not-there", "--gcs-endpoint", fake_gcs.endpoint,
                           "--gcs-anonymous", "true"],
        "not a service account": ["--warehouse", f"gs://{fake_gcs.create_bucket()}", "--gcs-endpoint",
                                  fake_gcs.endpoint, "--gcs-service-account-key", str(bad_file)],
        "abfss": ["--warehouse", "abfss://wh@acct.dfs.core.windows.net/lake"],
        "sas without Azure": ["--warehouse", str(tmp_path / "wh"), "--credentials", "sas"],
    }
    for what, args in cases.items():
        out = subprocess.run([gateway_binary(), "serve", "--listen", "127.0.0.1:0", *args],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (what, out.returncode, out.stderr[-2000:])
        line = out.stderr.strip().splitlines()[-1]
        assert line.startswith("lance-gateway: invalid setting `"), (what, line)
        assert "panicked" not in out.stderr, (what, out.stderr)
