"""Managed versioning (`--managed-versioning`): the gateway answers `managed_versioning: true`
and pylance and LanceDB then commit every version through CreateTableVersion, which the
gateway checks (grants, the staging manifest's folder, no holes, one winner per version)
and publishes. On the local warehouse and on SeaweedFS, with API keys and grants."""

import threading
import urllib.parse
import uuid

import boto3
import lance
import lancedb
import lance_namespace as ln
import pyarrow as pa
import pytest
from lance.namespace import RestNamespace
from lancedb.index import IvfPq

from conftest import unique
from security import call, enc, keyed_gateway
from test_lancedb_remote import data

U64_MAX = 2**64 - 1


@pytest.fixture(scope="module", params=["local", "seaweedfs"])
def managed(request):
    with keyed_gateway(request, "lg-managed-", ("--managed-versioning", "true")) as gw:
        yield gw


def namespace(managed, who: str) -> RestNamespace:
    return RestNamespace(uri=managed["gw"].uri, **{"headers.x-api-key": managed["keys"][who]})


def table_id(managed, name: str) -> list[str]:
    return managed["base"] + [unique(name)]


class Objects:
    """The warehouse's objects, read and written as the client's object store sees them."""

    def __init__(self, managed):
        self.storage = managed["storage"]
        if self.storage and "aws_endpoint" in self.storage:
            self.s3 = boto3.client(
                "s3", endpoint_url=self.storage["aws_endpoint"], region_name="us-east-1",
                aws_access_key_id=self.storage["aws_access_key_id"],
                aws_secret_access_key=self.storage["aws_secret_access_key"])

    def _split(self, location: str, path: str) -> tuple[str, str]:
        """(bucket, key) or ("", file path) of `path`, a store path the gateway answered."""
        if location.startswith("s3://"):
            return urllib.parse.urlparse(location).netloc, path
        return "", "/" + path

    def folder(self, location: str) -> str:
        """The store path of a table location (what Lance's object store calls it)."""
        if location.startswith("s3://"):
            return urllib.parse.urlparse(location).path.lstrip("/")
        return urllib.parse.urlparse(location).path.lstrip("/")

    def read(self, location: str, path: str) -> bytes | None:
        bucket, key = self._split(location, path)
        try:
            if bucket:
                return self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            with open(key, "rb") as f:
                return f.read()
        except (FileNotFoundError, self.s3.exceptions.NoSuchKey if self.storage else FileNotFoundError):
            return None

    def write(self, location: str, path: str, body: bytes):
        bucket, key = self._split(location, path)
        if bucket:
            self.s3.put_object(Bucket=bucket, Key=key, Body=body)
        else:
            with open(key, "wb") as f:
                f.write(body)

    def versions_folder(self, location: str) -> list[str]:
        """The names in the table's `_versions/` folder."""
        prefix = self.folder(location).rstrip("/") + "/_versions/"
        if location.startswith("s3://"):
            bucket = urllib.parse.urlparse(location).netloc
            out = self.s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
            return sorted(o["Key"][len(prefix):] for o in out)
        if location.startswith(("gs://", "az://")):
            import pyarrow.fs as pafs
            if location.startswith("gs://"):
                host = urllib.parse.urlparse(self.storage["google_base_url"]).netloc
                fs = pafs.GcsFileSystem(anonymous=True, scheme="http", endpoint_override=host)
            else:
                import emulators
                host = urllib.parse.urlparse(self.storage["azure_storage_endpoint"]).netloc
                fs = pafs.AzureFileSystem(account_name=emulators.AZURE_ACCOUNT, account_key=emulators.AZURE_KEY,
                                          blob_storage_authority=host, blob_storage_scheme="http",
                                          dfs_storage_authority=host, dfs_storage_scheme="http")
            folder = urllib.parse.urlparse(location).netloc + "/" + prefix
            infos = fs.get_file_info(pafs.FileSelector(folder.rstrip("/"), allow_not_found=True))
            return sorted(i.path[len(folder):] for i in infos)
        import os
        return sorted(os.listdir("/" + prefix))


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def removed_soon(objects: "Objects", location: str, path: str) -> bool:
    """Whether `path` is gone within a few seconds: the gateway deletes a published staging
    manifest right after its answer."""
    import time
    deadline = time.time() + 10
    while objects.read(location, path) is not None:
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


def final_name(version: int) -> str:
    return f"{U64_MAX - version:020}.manifest"


def describe(managed, tid, who="app") -> dict:
    status, body, _ = call(managed["gw"].uri, "POST", f"/v1/table/{enc(tid)}/describe",
                           {"id": tid}, {"x-api-key": managed["keys"][who]})
    assert status == 200, body
    return body


def test_pylance_commits_every_version_through_the_gateway(managed):
    ns = namespace(managed, "app")
    tid = table_id(managed, "py")
    ds = lance.write_dataset(data(100), namespace_client=ns, table_id=tid, mode="create")
    assert ds.version == 1
    described = describe(managed, tid)
    assert described["managed_versioning"] is True
    location = described["location"]

    ds = lance.write_dataset(data(50, start=100), namespace_client=ns, table_id=tid, mode="append")
    assert ds.version == 2
    ds = lance.dataset(namespace_client=ns, table_id=tid)
    assert ds.count_rows() == 150
    ds.delete("id < 10")
    ds.create_scalar_index("id", "BTREE")
    assert ds.version == 4

    # What Lance sees on storage: four final manifests and no staging manifest left over.
    objects = Objects(managed)
    expected = sorted(final_name(v) for v in (1, 2, 3, 4))
    import time
    deadline = time.time() + 10  # staging manifests are deleted right after each answer
    while (manifests := [n for n in objects.versions_folder(location) if ".manifest" in n]) != expected:
        if time.time() > deadline:
            break
        time.sleep(0.05)
    assert manifests == expected
    # The gateway's listing names the manifests as Lance's object store does.
    listed = ns.list_table_versions(ln.ListTableVersionsRequest(id=tid, descending=True, limit=1))
    assert [v.version for v in listed.versions] == [4]
    assert listed.versions[0].manifest_path == objects.folder(location).rstrip("/") + "/_versions/" + final_name(4)

    fresh = lance.dataset(namespace_client=namespace(managed, "viewer"), table_id=tid)
    assert fresh.count_rows() == 140
    assert sorted(fresh.to_table(columns=["id"])["id"].to_pylist()) == list(range(10, 150))
    assert [v["version"] for v in fresh.versions()] == [1, 2, 3, 4]
    assert fresh.checkout_version(2).count_rows() == 150


def test_a_reader_cannot_commit(managed):
    """Commits go through the gateway, so its grants hold even where the storage would let
    the client write (a local folder has no credentials at all)."""
    tid = table_id(managed, "ro")
    lance.write_dataset(data(20), namespace_client=namespace(managed, "app"), table_id=tid, mode="create")
    with pytest.raises(Exception):
        lance.write_dataset(data(5, start=20), namespace_client=namespace(managed, "viewer"), table_id=tid,
                            mode="append")
    ds = lance.dataset(namespace_client=namespace(managed, "app"), table_id=tid)
    assert ds.version == 1 and ds.count_rows() == 20
    location = describe(managed, tid)["location"]
    assert [n for n in Objects(managed).versions_folder(location) if n.endswith(".manifest")] == [final_name(1)]


def test_concurrent_writers_both_land(managed):
    """Two writers committing from the same version: one wins each version, the other is
    told of the conflict, rebases and lands next. No rows are lost."""
    tid = table_id(managed, "race")
    lance.write_dataset(data(10), namespace_client=namespace(managed, "app"), table_id=tid, mode="create")
    handles = [lance.dataset(namespace_client=namespace(managed, "app"), table_id=tid) for _ in range(2)]
    errors = []

    def add(ds, start):
        try:
            ds.insert(data(10, start=start))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=add, args=(h, 100 * (i + 1))) for i, h in enumerate(handles)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ds = lance.dataset(namespace_client=namespace(managed, "app"), table_id=tid)
    assert ds.version == 3 and ds.count_rows() == 30
    assert sorted(ds.to_table(columns=["id"])["id"].to_pylist()) == list(range(10)) + list(range(100, 110)) + list(range(200, 210))


def test_lancedb_through_a_managed_gateway(managed):
    db = lancedb.connect_namespace("rest", {"uri": managed["gw"].uri, "headers.x-api-key": managed["keys"]["app"]})
    path = managed["base"] or None
    name = unique("ldb")
    tbl = db.create_table(name, data(300), namespace_path=path)
    tbl.add(data(100, start=300))
    tbl.create_index("vector", config=IvfPq(distance_type="l2", num_partitions=2, num_sub_vectors=2))
    assert tbl.count_rows() == 400
    query = data(1, seed=99)["vector"][0].as_py()
    hits = tbl.search(query).limit(5).to_arrow()
    assert len(hits) == 5
    assert tbl.search().where("id < 3").to_arrow().num_rows == 3
    versions = [v["version"] for v in tbl.list_versions()]
    assert versions == [1, 2, 3]
    reopened = db.open_table(name, namespace_path=path)
    assert reopened.count_rows() == 400 and reopened.version == 3


def version_create(managed, tid, body: dict, who="app"):
    return call(managed["gw"].uri, "POST", f"/v1/table/{enc(tid)}/version/create", {"id": tid, **body},
                {"x-api-key": managed["keys"][who]})


def test_version_create_refuses_what_is_not_a_commit(managed):
    ns = namespace(managed, "app")
    tid = table_id(managed, "raw")
    lance.write_dataset(data(10), namespace_client=ns, table_id=tid, mode="create")
    lance.write_dataset(data(10, start=10), namespace_client=ns, table_id=tid, mode="append")
    other = table_id(managed, "other")
    lance.write_dataset(data(3), namespace_client=ns, table_id=other, mode="create")
    location, other_location = describe(managed, tid)["location"], describe(managed, other)["location"]
    objects = Objects(managed)
    folder = objects.folder(location).rstrip("/") + "/_versions/"
    v2 = objects.read(location, folder + final_name(2))
    before = objects.versions_folder(location)

    def staged(version: int, body: bytes, base: str = folder, loc: str = location) -> str:
        path = f"{base}{final_name(version)}-{uuid.uuid4()}"
        objects.write(loc, path, body)
        return path

    # Another table's manifest, staged in that table's folder: not this table's to publish.
    other_folder = objects.folder(other_location).rstrip("/") + "/_versions/"
    status, body, _ = version_create(managed, tid, {
        "version": 3, "manifest_path": staged(3, v2, other_folder, other_location), "naming_scheme": "V2"})
    assert (status, body["code"]) == (400, 13), body
    # The final manifest itself (a replay the reference server answered by deleting it).
    status, body, _ = version_create(managed, tid, {
        "version": 2, "manifest_path": folder + final_name(2), "naming_scheme": "V2"})
    assert (status, body["code"]) == (400, 13), body
    assert objects.read(location, folder + final_name(2)) == v2
    # A staging name of another version than the one committed.
    status, body, _ = version_create(managed, tid, {
        "version": 3, "manifest_path": staged(4, v2), "naming_scheme": "V2"})
    assert (status, body["code"]) == (400, 13), body
    # A staging manifest that does not exist.
    status, body, _ = version_create(managed, tid, {
        "version": 3, "manifest_path": f"{folder}{final_name(3)}-{uuid.uuid4()}", "naming_scheme": "V2"})
    assert (status, body["code"]) == (400, 13), body
    # A version that would leave a hole.
    status, body, _ = version_create(managed, tid, {
        "version": 4, "manifest_path": staged(4, v2), "naming_scheme": "V2"})
    assert (status, body["code"]) == (409, 14), body
    # A version already taken, with other bytes: a rival's commit.
    status, body, _ = version_create(managed, tid, {
        "version": 2, "manifest_path": staged(2, v2 + b"x"), "naming_scheme": "V2"})
    assert (status, body["code"]) == (409, 14), body
    assert objects.read(location, folder + final_name(2)) == v2
    # ...with the same bytes: the same commit retried, which succeeds.
    retried = staged(2, v2)
    status, body, _ = version_create(managed, tid, {"version": 2, "manifest_path": retried, "naming_scheme": "V2"})
    assert status == 200, body
    assert body["version"]["version"] == 2 and body["version"]["manifest_path"] == folder + final_name(2)
    assert body["version"]["manifest_size"] == len(v2)
    assert removed_soon(objects, location, retried), "the staging manifest was left behind"
    # Grants: a reader is refused; a caller with no grant is told the table (or, under a
    # bucket, its namespace) is not there.
    status, body, _ = version_create(managed, tid, {
        "version": 3, "manifest_path": staged(3, v2), "naming_scheme": "V2"}, who="viewer")
    assert (status, body["code"]) == (403, 15), body
    status, body, _ = version_create(managed, tid, {
        "version": 3, "manifest_path": staged(3, v2), "naming_scheme": "V2"}, who="nobody")
    assert (status, body["code"]) == (404, 1 if managed["base"] else 4), body
    # Malformed requests.
    for bad in ({"version": 3}, {"version": "three", "manifest_path": "x"},
                {"version": 0, "manifest_path": f"{folder}{final_name(0)}-x"},
                {"version": 3, "manifest_path": staged(3, v2), "naming_scheme": "V9"}):
        status, body, _ = version_create(managed, tid, bad)
        assert (status, body["code"]) == (400, 13), (bad, body)

    # None of it published anything: the table is as it was, at version 2.
    after = [n for n in objects.versions_folder(location) if n.endswith(".manifest")]
    assert after == [n for n in before if n.endswith(".manifest")]
    ds = lance.dataset(namespace_client=ns, table_id=tid)
    assert ds.version == 2 and ds.count_rows() == 20


def test_deleting_versions(managed):
    ns = namespace(managed, "app")
    tid = table_id(managed, "del")
    lance.write_dataset(data(5), namespace_client=ns, table_id=tid, mode="create")
    for i in range(4):
        lance.write_dataset(data(5, start=5 * (i + 1)), namespace_client=ns, table_id=tid, mode="append")
    ds = lance.dataset(namespace_client=ns, table_id=tid)
    assert ds.version == 5
    ds.tags.create("keep", 2)
    uri, path = managed["gw"].uri, f"/v1/table/{enc(tid)}/version/delete"

    def delete(ranges, who="ops"):
        return call(uri, "POST", path, {"id": tid, "ranges": ranges}, {"x-api-key": managed["keys"][who]})

    status, body, _ = delete([{"start_version": 1, "end_version": 2}], who="app")
    assert (status, body["code"]) == (403, 15), body
    status, body, _ = delete([{"start_version": 4, "end_version": -1}])
    assert (status, body["code"]) == (400, 13) and "latest" in body["error"], body
    status, body, _ = delete([{"start_version": 1, "end_version": 3}])
    assert (status, body["code"]) == (400, 13) and "keep" in body["error"], body
    status, body, _ = delete([{"start_version": 1, "end_version": 2}, {"start_version": 3, "end_version": 5}])
    assert status == 200 and body["deleted_count"] == 3, body

    listed = ns.list_table_versions(ln.ListTableVersionsRequest(id=tid))
    assert [v.version for v in listed.versions] == [2, 5]
    fresh = lance.dataset(namespace_client=ns, table_id=tid)
    assert fresh.version == 5 and fresh.count_rows() == 25
    assert fresh.checkout_version("keep").count_rows() == 10


def test_gateway_writes_and_managed_commits_interleave(managed):
    """The gateway's own data operations commit beside managed clients: each sees the
    other's versions, and the numbers run on without a gap."""
    ns = namespace(managed, "app")
    tid = table_id(managed, "mix")
    created = ns.create_table(ln.CreateTableRequest(id=tid), ipc(data(10)))
    assert created.version == 1
    ds = lance.write_dataset(data(10, start=10), namespace_client=ns, table_id=tid, mode="append")
    assert ds.version == 2
    inserted = ns.insert_into_table(ln.InsertIntoTableRequest(id=tid), ipc(data(10, start=20)))
    assert inserted.version == 3
    ds = lance.dataset(namespace_client=ns, table_id=tid)
    assert ds.version == 3 and ds.count_rows() == 30
    ds.delete("id >= 25")
    assert ds.version == 4
    assert ns.count_table_rows(ln.CountTableRowsRequest(id=tid)).count == 25


def test_a_branch_commits_through_the_gateway(managed):
    ns = namespace(managed, "app")
    tid = table_id(managed, "br")
    ds = lance.write_dataset(data(10), namespace_client=ns, table_id=tid, mode="create")
    lance.write_dataset(data(10, start=10), namespace_client=ns, table_id=tid, mode="append")
    ds = lance.dataset(namespace_client=ns, table_id=tid)
    branch = ds.create_branch("exp", 2)
    branch.insert(data(5, start=100))
    assert branch.count_rows() == 25
    main = lance.dataset(namespace_client=ns, table_id=tid)
    assert main.count_rows() == 20 and main.version == 2
    again = lance.dataset(namespace_client=ns, table_id=tid).checkout_version(("exp", None))
    assert again.count_rows() == 25
    listed = ns.list_table_versions(ln.ListTableVersionsRequest(id=tid, branch="exp", descending=True, limit=1))
    assert listed.versions[0].version == branch.version
    assert "/tree/exp/_versions/" in listed.versions[0].manifest_path


def test_a_commit_retried_after_its_answer_was_lost_gets_the_same_answer(managed):
    """A client whose CreateTableVersion answer was lost sends the identical request again:
    it is told of the success it had (same version, same final manifest), also once the
    gateway has removed the staging manifest. Another commit of that version is a rival's."""
    ns = namespace(managed, "app")
    tid = table_id(managed, "retry")
    lance.write_dataset(data(10), namespace_client=ns, table_id=tid, mode="create")
    location = describe(managed, tid)["location"]
    objects = Objects(managed)
    folder = objects.folder(location).rstrip("/") + "/_versions/"
    v1 = objects.read(location, folder + final_name(1))
    staged = f"{folder}{final_name(2)}-{uuid.uuid4()}"
    objects.write(location, staged, v1 + b"2")
    request = {"version": 2, "manifest_path": staged, "manifest_size": len(v1) + 1, "naming_scheme": "V2"}
    status, first, _ = version_create(managed, tid, request)
    assert status == 200, first
    assert removed_soon(objects, location, staged), "the staging manifest was left behind"
    status, again, _ = version_create(managed, tid, request)
    assert status == 200, again
    assert again["version"] == first["version"]
    assert again["version"]["manifest_path"] == folder + final_name(2)
    # Another staging manifest for the taken version, with other bytes: a rival's, 409.
    rival = f"{folder}{final_name(2)}-{uuid.uuid4()}"
    objects.write(location, rival, v1 + b"rival")
    status, body, _ = version_create(managed, tid, {**request, "manifest_path": rival, "manifest_size": len(v1) + 5})
    assert (status, body["code"]) == (409, 14), body
    # A staging name that was never written is still a client's mistake, 400.
    status, body, _ = version_create(managed, tid, {**request, "manifest_path": f"{folder}{final_name(2)}-{uuid.uuid4()}"})
    assert (status, body["code"]) == (400, 13), body
    assert objects.read(location, folder + final_name(2)) == v1 + b"2"


@pytest.fixture(params=["local", "seaweedfs"])
def managed_metered(request):
    from conftest import free_port
    port = free_port()
    with keyed_gateway(request, "lg-bypass-", ("--managed-versioning", "true",
                                               "--metrics-listen", f"127.0.0.1:{port}")) as gw:
        gw["metrics"] = f"http://127.0.0.1:{port}/metrics"
        yield gw


def unmanaged_commits(managed) -> float:
    import urllib.request
    text = urllib.request.urlopen(managed["metrics"], timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("lance_gateway_unmanaged_commits_total"):
            return float(line.split()[-1])
    return 0.0


def test_commits_behind_a_managed_tables_back_are_reported(managed_metered):
    """A client that commits to `_versions/` itself (lance-ray does) bypasses the gateway's
    ordering and grants: the next managed read shows the gateway a version it did not
    commit, which it logs once per table and counts. Versions through the gateway (its
    clients' commits and its own data operations) are not counted."""
    import time
    managed = managed_metered
    ns = namespace(managed, "app")
    tid = table_id(managed, "bypass")
    lance.write_dataset(data(10), namespace_client=ns, table_id=tid, mode="create")
    ns.insert_into_table(ln.InsertIntoTableRequest(id=tid), ipc(data(5, start=10)))
    ds = lance.dataset(namespace_client=ns, table_id=tid)
    assert ds.version == 2
    lance.write_dataset(data(5, start=15), namespace_client=ns, table_id=tid, mode="append")
    lance.dataset(namespace_client=ns, table_id=tid).count_rows()
    time.sleep(6.5)
    assert unmanaged_commits(managed) == 0, "versions through the gateway are not bypasses"

    # Straight to storage, as lance-ray commits.
    location = describe(managed, tid)["location"]
    lance.write_dataset(data(5, start=20), location, mode="append", storage_options=managed["storage"] or {})
    lance.write_dataset(data(5, start=25), location, mode="append", storage_options=managed["storage"] or {})
    seen = lance.dataset(namespace_client=ns, table_id=tid)
    assert seen.version == 5 and seen.count_rows() == 30
    deadline = time.time() + 20
    while time.time() < deadline and unmanaged_commits(managed) < 2:
        time.sleep(0.5)
    assert unmanaged_commits(managed) == 2
    log = open(managed["gw"].log).read()
    assert log.count("not committed through the gateway") == 1, log[-3000:]
    # Once more behind its back: counted again, logged no more.
    lance.write_dataset(data(5, start=30), location, mode="append", storage_options=managed["storage"] or {})
    lance.dataset(namespace_client=ns, table_id=tid).count_rows()
    deadline = time.time() + 20
    while time.time() < deadline and unmanaged_commits(managed) < 3:
        time.sleep(0.5)
    assert unmanaged_commits(managed) == 3
    assert open(managed["gw"].log).read().count("not committed through the gateway") == 1
