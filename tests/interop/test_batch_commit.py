"""Batch commits (BatchCommitTables, BatchCreateTableVersions) through the commit log, with
pylance writing and reading managed tables, on the local warehouse and on SeaweedFS. The
batches are made with the repository's own helper (`clients/python`, installed by CI with
pip), which records pylance's commits inside a `with transaction(...)` block and sends one
BatchCommitTables when the block ends."""

import os
import random
import signal
import subprocess
import threading
import time
import uuid

import lance
import lance_namespace as ln
import lancedb
import pytest
from lance.namespace import RestNamespace
from lance_gateway import TransactionError, transaction

from conftest import gateway_binary, start_gateway
from security import call, enc, keyed_gateway
from test_data_plane import ipc_stream
from test_lancedb_remote import data
from test_managed_versioning import Objects, describe, final_name, namespace, table_id


@pytest.fixture(scope="module", params=["local", "seaweedfs"])
def managed(request):
    with keyed_gateway(request, "lg-batch-", ("--managed-versioning", "true")) as gw:
        yield gw


def tx_of(managed, who="app"):
    return transaction(managed["gw"].uri, headers={"x-api-key": managed["keys"][who]})


def tables(managed, n: int, rows: int = 10) -> list[list[str]]:
    ns = namespace(managed, "app")
    ids = [table_id(managed, f"b{i}") for i in range(n)]
    for tid in ids:
        lance.write_dataset(data(rows), namespace_client=ns, table_id=tid, mode="create")
    return ids


def latest(managed, tid, who="app") -> int:
    """The version a managed reader resolves as the newest (what pylance asks before every
    read with strong consistency)."""
    listed = namespace(managed, who).list_table_versions(
        ln.ListTableVersionsRequest(id=tid, descending=True, limit=1))
    return listed.versions[0].version


def test_a_batch_over_three_tables_is_seen_whole_by_polling_readers(managed):
    ids = tables(managed, 3)
    for round_ in range(3):
        before = {tuple(t): latest(managed, t) for t in ids}
        seen: list[list[tuple[int, bool]]] = [[] for _ in range(3)]
        stop = threading.Event()
        failures = []

        def poll(out):
            try:
                while not stop.is_set():
                    for i, tid in enumerate(ids):
                        out.append((i, latest(managed, tid) > before[tuple(tid)]))
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append(e)

        readers = [threading.Thread(target=poll, args=(s,)) for s in seen]
        for r in readers:
            r.start()
        time.sleep(0.2)
        with tx_of(managed) as tx:
            for i, tid in enumerate(ids):
                lance.write_dataset(data(5, start=100 * (round_ + 1) + 10 * i), namespace_client=tx.namespace,
                                    table_id=tid, mode="append")
            # Written, not committed: managed readers still see every table as it was.
            assert all(latest(managed, t) == before[tuple(t)] for t in ids)
        time.sleep(0.2)
        stop.set()
        for r in readers:
            r.join()
        assert not failures, failures
        assert tx.transaction_id
        assert tx.versions == {tuple(t): before[tuple(t)] + 1 for t in ids}
        for reads in seen:
            assert reads, "a reader read nothing"
            # Each reader reads the tables one after another: once it has seen one table
            # new, every later read of any table is new (never new docs with old embeddings).
            first_new = next((k for k, (_, new) in enumerate(reads) if new), len(reads))
            assert all(new for _, new in reads[first_new:]), reads[max(0, first_new - 3):first_new + 6]
            assert reads[-1][1], "the batch was not visible at the end"
    ns = namespace(managed, "viewer")
    for i, tid in enumerate(ids):
        ds = lance.dataset(namespace_client=ns, table_id=tid)
        assert ds.version == 4 and ds.count_rows() == 25
        assert sorted(ds.to_table(columns=["id"])["id"].to_pylist())[-5:] == list(range(300 + 10 * i, 305 + 10 * i))
    # What storage holds: every version at its final name, no staging manifest left.
    objects = Objects(managed)
    location = describe(managed, ids[0])["location"]
    deadline = time.time() + 10
    while (names := [n for n in objects.versions_folder(location) if ".manifest" in n]) != sorted(
            final_name(v) for v in (1, 2, 3, 4)):
        assert time.time() < deadline, names
        time.sleep(0.05)


def test_the_batch_is_a_transaction_describe_knows(managed):
    ids = tables(managed, 2)
    with tx_of(managed) as tx:
        for tid in ids:
            lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=tid, mode="append")
    status, body, _ = call(managed["gw"].uri, "POST", f"/v1/transaction/{tx.transaction_id}/describe", {},
                           {"x-api-key": managed["keys"]["app"]})
    assert status == 200, body
    assert body["status"] == "Succeeded"
    assert body["properties"]["lance_gateway.operation"] == "batch_commit"
    assert body["properties"]["lance_gateway.tables"] == "2"


def test_a_block_that_raises_commits_nothing(managed):
    ids = tables(managed, 2)
    with pytest.raises(RuntimeError):
        with tx_of(managed) as tx:
            for tid in ids:
                lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=tid, mode="append")
            raise RuntimeError("the pipeline failed half-way")
    assert tx.transaction_id is None
    for tid in ids:
        ds = lance.dataset(namespace_client=namespace(managed, "app"), table_id=tid)
        assert ds.version == 1 and ds.count_rows() == 10


def test_a_batch_with_one_conflicting_entry_is_refused_whole(managed):
    """A rival commits to one table while the batch is being written: the batch's version
    of that table no longer follows, so the whole batch is refused (409, code 14) and the
    other table stays as it was."""
    a, b = tables(managed, 2)
    with pytest.raises(TransactionError) as refused:
        with tx_of(managed) as tx:
            lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=a, mode="append")
            lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=b, mode="append")
            lance.write_dataset(data(7, start=70), namespace_client=namespace(managed, "app"), table_id=b,
                                mode="append")
    assert (refused.value.status, refused.value.code) == (409, 14), refused.value
    ns = namespace(managed, "app")
    ds_a = lance.dataset(namespace_client=ns, table_id=a)
    assert ds_a.version == 1 and ds_a.count_rows() == 10
    ds_b = lance.dataset(namespace_client=ns, table_id=b)
    assert ds_b.version == 2 and ds_b.count_rows() == 17
    # The refused batch left no lock: both tables take the next commit at once.
    with tx_of(managed) as tx:
        for tid in (a, b):
            lance.write_dataset(data(1, start=90), namespace_client=tx.namespace, table_id=tid, mode="append")
    assert tx.versions == {tuple(a): 2, tuple(b): 3}


def batch_create(managed, entries, who="app"):
    return call(managed["gw"].uri, "POST", "/v1/table/version/batch-create", {"entries": entries},
                {"x-api-key": managed["keys"][who]})


def test_batches_that_are_not_commits_are_refused_whole(managed):
    a, b = tables(managed, 2)
    objects = Objects(managed)
    loc_a, loc_b = describe(managed, a)["location"], describe(managed, b)["location"]
    dir_a = objects.folder(loc_a).rstrip("/") + "/_versions/"
    dir_b = objects.folder(loc_b).rstrip("/") + "/_versions/"
    v1_a = objects.read(loc_a, dir_a + final_name(1))
    v1_b = objects.read(loc_b, dir_b + final_name(1))

    def staged(loc, folder, body, version=2):
        path = f"{folder}{final_name(version)}-{uuid.uuid4()}"
        objects.write(loc, path, body)
        return path

    good_a = {"id": a, "version": 2, "manifest_path": staged(loc_a, dir_a, v1_a), "naming_scheme": "V2"}
    # Table b's entry names a manifest staged in table a's folder: not b's to publish.
    stray = {"id": b, "version": 2, "manifest_path": staged(loc_a, dir_a, v1_b), "naming_scheme": "V2"}
    status, body, _ = batch_create(managed, [good_a, stray])
    assert (status, body["code"]) == (400, 13), body
    # A hole in b.
    hole = {"id": b, "version": 3, "manifest_path": staged(loc_b, dir_b, v1_b, 3), "naming_scheme": "V2"}
    status, body, _ = batch_create(managed, [good_a, hole])
    assert (status, body["code"]) == (409, 14), body
    # The same table twice, an empty batch, an entry with no id, a reader's batch.
    status, body, _ = batch_create(managed, [good_a, dict(good_a)])
    assert (status, body["code"]) == (400, 13), body
    status, body, _ = batch_create(managed, [])
    assert (status, body["code"]) == (400, 13), body
    status, body, _ = batch_create(managed, [{k: v for k, v in good_a.items() if k != "id"}])
    assert (status, body["code"]) == (400, 13), body
    status, body, _ = batch_create(managed, [good_a], who="viewer")
    assert (status, body["code"]) == (403, 15), body
    # A deregister of a table that is not there refuses the batch with it.
    missing = managed["base"] + ["no-such-table"]
    status, body, _ = call(managed["gw"].uri, "POST", "/v1/table/batch-commit",
                           {"operations": [{"create_table_version": good_a}, {"deregister_table": {"id": missing}}]},
                           {"x-api-key": managed["keys"]["ops"]})
    assert (status, body["code"]) == (404, 4), body
    # None of it is visible: both tables at version 1.
    assert latest(managed, a) == 1 and latest(managed, b) == 1
    assert [n for n in objects.versions_folder(loc_a) if n.endswith(".manifest")] == [final_name(1)]
    # The good entry alone commits.
    good_b = {"id": b, "version": 2, "manifest_path": staged(loc_b, dir_b, v1_b), "naming_scheme": "V2"}
    status, body, _ = batch_create(managed, [good_a, good_b])
    assert status == 200, body
    assert [v["version"] for v in body["versions"]] == [2, 2]
    assert body["versions"][1]["manifest_path"] == dir_b + final_name(2)
    assert body["transaction_id"]
    # (The manifests staged here are copies of version 1's, so storage is what to look at.)
    assert objects.read(loc_a, dir_a + final_name(2)) == v1_a
    assert objects.read(loc_b, dir_b + final_name(2)) == v1_b


def test_lancedb_reads_what_a_batch_committed(managed):
    ids = tables(managed, 2, rows=20)
    with tx_of(managed) as tx:
        for tid in ids:
            lance.write_dataset(data(5, start=500), namespace_client=tx.namespace, table_id=tid, mode="append")
    db = lancedb.connect_namespace("rest", {"uri": managed["gw"].uri, "headers.x-api-key": managed["keys"]["viewer"]})
    for tid in ids:
        t = db.open_table(tid[-1], namespace_path=tid[:-1] or None)
        assert t.version == 2 and t.count_rows() == 25
        assert t.search().where("id >= 500").to_arrow().num_rows == 5


def test_concurrent_appenders_lose_no_rows_through_the_log(managed):
    """Four pylance writers appending to one managed table at once: every commit goes
    through the log, each loser rebases and lands next, no rows are lost."""
    (tid,) = tables(managed, 1, rows=1)
    errors = []

    def add(k):
        try:
            for j in range(3):
                lance.write_dataset(data(2, start=1000 * (k + 1) + 10 * j), namespace_client=namespace(managed, "app"),
                                    table_id=tid, mode="append")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    ds = lance.dataset(namespace_client=namespace(managed, "app"), table_id=tid)
    assert ds.version == 13 and ds.count_rows() == 1 + 4 * 3 * 2
    assert [v["version"] for v in ds.versions()] == list(range(1, 14))


# ------------------------------------------------------------------ gateways killed mid-batch


def warehouse_args(managed) -> list[str]:
    """The warehouse settings alone (what `admin` takes), from the keyed gateway's."""
    return managed["args"][:managed["args"].index("--api-keys")]


def start_beside(managed, env: dict | None = None):
    """Another gateway over the same warehouse, keys and grants, with a short grace period."""
    return start_gateway([*managed["args"], "--recovery-grace-secs", "3"], {**managed["env"], **(env or {})})


def fsck_clean(managed):
    out = subprocess.run([gateway_binary(), "admin", "fsck", *warehouse_args(managed)], capture_output=True,
                         text=True, env={**os.environ, **managed["env"]}, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def versions_seen(managed, gw, ids) -> list[int]:
    ns = RestNamespace(uri=gw.uri, **{"headers.x-api-key": managed["keys"]["app"]})
    return [ns.list_table_versions(ln.ListTableVersionsRequest(id=t, descending=True, limit=1)).versions[0].version
            for t in ids]


def batch_in_thread(gw, managed, ids, start: int, then=None):
    """Appends 3 rows (ids start..start+2) to every table in one batch through `gw`, in a
    thread; answers the thread and a list that receives the outcome. Sent once, unless
    `then` names another gateway: a batch whose answer is lost is then resent there, under
    the block's key, until the batch's outcome is settled."""
    outcome = []
    uris = [gw.uri] if then is None else [gw.uri, then.uri]

    def run():
        try:
            with transaction(uris, headers={"x-api-key": managed["keys"]["app"]},
                             retry_for=0 if then is None else 60) as tx:
                for tid in ids:
                    lance.write_dataset(data(3, start=start), namespace_client=tx.namespace, table_id=tid,
                                        mode="append")
            outcome.append(("committed", tx.versions))
        except Exception as e:  # noqa: BLE001 - the gateway is killed under it
            outcome.append(("failed", e))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def paused_at_fault(gw):
    """Waits until `gw`'s batch has stopped at its fault-injection step."""
    deadline = time.time() + 60
    while "fault injection: pausing a batch commit" not in open(gw.log).read():
        assert time.time() < deadline, open(gw.log).read()[-3000:]
        time.sleep(0.05)


def paused_after_locks(managed, batch, answer):
    """Starts another gateway whose batches pause 3 s after their locks, and runs
    `batch(tx)` in a transaction of the admin key through it, in a thread. Returns once the
    batch is paused: the gateway, the thread, and a list that receives `answer(tx)` once the
    batch commits (or the error)."""
    slow = start_beside(managed, {"LANCE_GATEWAY_FAULT_BATCH_PAUSE": "locked",
                                  "LANCE_GATEWAY_FAULT_BATCH_PAUSE_MS": "3000"})
    outcome = []

    def run():
        try:
            with transaction(slow.uri, headers={"x-api-key": managed["keys"]["ops"]}) as tx:
                batch(tx)
            outcome.append(answer(tx))
        except Exception as e:  # noqa: BLE001 - reported by the test
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        paused_at_fault(slow)
    except BaseException:
        thread.join(timeout=60)
        slow.stop()
        raise
    return slow, thread, outcome


def batch_killed(doomed, managed, batch, wait) -> list:
    """Runs `batch(tx)` inside a transaction of the admin key through `doomed`, in a thread,
    SIGKILLs `doomed` once `wait()` returns, and answers what the client was told:
    `["committed"]`, or the error."""
    outcome = []

    def run():
        try:
            with transaction(doomed.uri, headers={"x-api-key": managed["keys"]["ops"]}, retry_for=0) as tx:
                batch(tx)
            outcome.append("committed")
        except Exception as e:  # noqa: BLE001 - the gateway is killed under it
            outcome.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    wait()
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()
    thread.join(timeout=60)
    return outcome


def killed_at_fault(doomed, managed, batch):
    """`batch_killed` for `doomed` started with a fault step: killed once its batch stops
    there, and the client was not told the batch committed."""
    outcome = batch_killed(doomed, managed, batch, lambda: paused_at_fault(doomed))
    assert outcome and outcome[0] != "committed", outcome


def rows_of(managed, gw, ids, marker: int) -> list[int]:
    """How many rows of the batch marked `marker` each table holds, as managed readers see it."""
    ns = RestNamespace(uri=gw.uri, **{"headers.x-api-key": managed["keys"]["app"]})
    return [lance.dataset(namespace_client=ns, table_id=t).count_rows(f"id >= {marker} AND id < {marker + 3}")
            for t in ids]


@pytest.mark.parametrize("step", ["recorded", "locked", "committed", "published_one"])
def test_a_gateway_killed_at_each_step_of_a_batch(managed, step):
    """Two gateways serve the warehouse; one is killed (SIGKILL) when a batch reaches
    `step`. The other then sees the batch whole (killed after the commit point: the next
    read publishes what the dead gateway had not) or not at all (before it: the lock keeps
    writers out until the grace period, then the batch is failed), and fsck is clean."""
    ids = tables(managed, 3)
    survivor = start_beside(managed)
    doomed = start_beside(managed, {"LANCE_GATEWAY_FAULT_BATCH_PAUSE": step})
    try:
        thread, outcome = batch_in_thread(doomed, managed, ids, 700)
        paused_at_fault(doomed)
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait()
        thread.join(timeout=60)
        assert outcome and outcome[0][0] == "failed", outcome
        committed = step in ("committed", "published_one")
        assert versions_seen(managed, survivor, ids) == ([2, 2, 2] if committed else [1, 1, 1])
        assert rows_of(managed, survivor, ids, 700) == ([3, 3, 3] if committed else [0, 0, 0])
        if not committed:
            # Past the grace period the dead batch is failed and its tables move on.
            time.sleep(3.5)
        fsck_clean(managed)
        thread, outcome = batch_in_thread(survivor, managed, ids, 800)
        thread.join(timeout=60)
        assert outcome[0][0] == "committed", outcome
        expected = 3 if committed else 2
        assert versions_seen(managed, survivor, ids) == [expected] * 3
        assert rows_of(managed, survivor, ids, 800) == [3, 3, 3]
    finally:
        if doomed.proc.poll() is None:
            doomed.proc.kill()
        assert survivor.stop() == 0


@pytest.mark.parametrize("step", ["recorded", "locked", "committed", "published_one"])
def test_a_batch_retried_by_key_on_the_other_gateway_applies_once(managed, step):
    """The client's gateway is SIGKILLed when its batch reaches `step`; the helper resends
    the batch, under the block's idempotency key, to the other gateway until it learns the
    outcome. The client is told exactly what happened: success, with the versions, where the
    batch committed (its rows there once, not twice); the settled failure, naming the batch,
    where it did not (no row). fsck is clean after."""
    ids = tables(managed, 3)
    survivor = start_beside(managed)
    doomed = start_beside(managed, {"LANCE_GATEWAY_FAULT_BATCH_PAUSE": step})
    try:
        thread, outcome = batch_in_thread(doomed, managed, ids, 900, then=survivor)
        paused_at_fault(doomed)
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait()
        thread.join(timeout=90)
        assert outcome, "the helper did not settle the batch"
        committed = step in ("committed", "published_one")
        if committed:
            assert outcome[0] == ("committed", {tuple(t): 2 for t in ids}), outcome
        else:
            kind, error = outcome[0]
            assert kind == "failed" and isinstance(error, TransactionError), outcome
            assert error.outcome == "failed" and error.transaction_id and error.code == 14, vars(error)
        assert rows_of(managed, survivor, ids, 900) == ([3, 3, 3] if committed else [0, 0, 0])
        assert versions_seen(managed, survivor, ids) == ([2, 2, 2] if committed else [1, 1, 1])
        fsck_clean(managed)
    finally:
        if doomed.proc.poll() is None:
            doomed.proc.kill()
        assert survivor.stop() == 0


def test_a_lost_answer_is_resent_by_the_helper_and_applies_once(managed):
    """The store loses the answer to a batch's deciding write, after it landed or before,
    and keeps failing the batch's record for a while: the gateway answers the distinct
    unknown-outcome error (504, code 18, the batch's id), DescribeTransaction settles it,
    and the helper, resending under its key, ends with the batch's one outcome. The rows are
    there once."""
    for landed in ("landed", "lost"):
        ids = tables(managed, 2)
        faulty = start_beside(managed, {"LANCE_GATEWAY_FAULT_COMMIT": landed,
                                        "LANCE_GATEWAY_FAULT_COMMIT_MS": "2500"})
        try:
            headers = {"x-api-key": managed["keys"]["app"]}
            # One send: the answer a client without the helper's retries gets.
            with pytest.raises(TransactionError) as raised:
                with transaction(faulty.uri, headers=headers, retry_for=0) as tx:
                    for tid in ids:
                        lance.write_dataset(data(4, start=600), namespace_client=tx.namespace, table_id=tid,
                                            mode="append")
            error = raised.value
            assert (error.status, error.code, error.outcome) == (504, 18, "unknown"), vars(error)
            assert error.transaction_id
            deadline = time.time() + 30
            while True:
                status, body, _ = call(faulty.uri, "POST", f"/v1/transaction/{error.transaction_id}/describe",
                                       {}, headers)
                if status == 200 and body["status"] != "Running":
                    break
                assert time.time() < deadline, (status, body)
                time.sleep(0.2)
            assert body["status"] == "Succeeded", body
            assert rows_of(managed, faulty, ids, 600)[:2] == [3, 3]
            # Resent under the same key, to either gateway: the same batch, applied once.
            for gw in (faulty, managed["gw"]):
                again = tx._send(json_body(tx), gw.uri)
                assert again[0] == 200 and again[1]["transaction_id"] == error.transaction_id, again
            assert rows_of(managed, faulty, ids, 600)[:2] == [3, 3]
            assert [len(lance.dataset(namespace_client=namespace(managed, "app"), table_id=t).to_table())
                    for t in ids] == [14, 14]

            # The helper's own retries: it resends until the outcome is settled, and returns.
            with transaction(faulty.uri, headers=headers) as tx:
                for tid in ids:
                    lance.write_dataset(data(4, start=700), namespace_client=tx.namespace, table_id=tid,
                                        mode="append")
            assert tx.versions == {tuple(t): 3 for t in ids}
            assert rows_of(managed, faulty, ids, 700)[:2] == [3, 3]
            assert [len(lance.dataset(namespace_client=namespace(managed, "app"), table_id=t).to_table())
                    for t in ids] == [18, 18]
        finally:
            assert faulty.stop() == 0
    fsck_clean(managed)


def json_body(tx) -> bytes:
    """The body the helper sent for `tx`'s batch."""
    import json
    return json.dumps({"operations": list(tx._pending.values())}).encode()


def test_the_same_key_with_another_batch_is_refused(managed):
    """A key names one request: sent with another batch it is refused (409, naming the key),
    and nothing of that batch is applied."""
    ids = tables(managed, 2)
    headers = {"x-api-key": managed["keys"]["app"]}
    with transaction(managed["gw"].uri, headers=headers) as first:
        lance.write_dataset(data(2, start=500), namespace_client=first.namespace, table_id=ids[0], mode="append")
    with pytest.raises(TransactionError) as raised:
        with transaction(managed["gw"].uri, headers=headers) as second:
            second.key = first.key
            lance.write_dataset(data(2, start=510), namespace_client=second.namespace, table_id=ids[1],
                                mode="append")
    assert (raised.value.status, raised.value.code) == (409, 14), vars(raised.value)
    assert first.key in str(raised.value)
    assert versions_seen(managed, managed["gw"], ids) == [2, 1]


def test_a_block_over_an_unmanaged_table_is_refused_before_anything_is_written(tmp_path):
    """Without managed versioning pylance commits each write itself, so a block could not
    be atomic: the helper refuses the block at the first table, before any data is written,
    and says how to turn managed versioning on."""
    gw = start_gateway(["--warehouse", str(tmp_path / "wh")])
    try:
        ns = RestNamespace(uri=gw.uri)
        ns.create_namespace(ln.CreateNamespaceRequest(id=["plain"]))
        lance.write_dataset(data(5), namespace_client=ns, table_id=["plain", "t"], mode="create")
        location = ns.describe_table(ln.DescribeTableRequest(id=["plain", "t"])).location
        before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "wh").rglob("*") if p.is_file())
        with pytest.raises(TransactionError, match="managed.versioning") as raised:
            with transaction(gw.uri) as tx:
                lance.write_dataset(data(5, start=5), namespace_client=tx.namespace, table_id=["plain", "t"],
                                    mode="append")
        assert raised.value.outcome == "refused"
        assert "--managed-versioning true" in str(raised.value)
        assert lance.dataset(location).count_rows() == 5
        after = sorted(p.relative_to(tmp_path) for p in (tmp_path / "wh").rglob("*") if p.is_file())
        assert after == before, set(after) - set(before)
        # The block stays refused: nothing is sent at its end either.
        with pytest.raises(TransactionError):
            tx.commit()
    finally:
        assert gw.stop() == 0


def test_overlapping_blocks_on_two_gateways_all_commit(managed):
    """Six clients on two gateways, each running three `transaction()` blocks that append to
    a random subset (two to four) of four tables, a refused block (409) run again at once on
    the new versions. Overlapping batches wait for each other in one order where they used
    to abort each other, so a block is refused only because a rival's block committed a
    version first: never because another batch held a table, and so at most as many times
    as there are other blocks. Every block commits, and each table holds exactly the rows of
    the blocks, once."""
    ids = tables(managed, 4)
    # Two gateways of their own, whose commit wait is the longest there is (10 s, where the
    # default request timeout makes it 7.5): with six clients in one process beside both
    # gateways and the store on two cores, a batch that waits in line behind two others
    # could otherwise run out its wait on a loaded machine and be refused as held, which
    # is the gateway's timing, not the ordering this test is about.
    slow = managed["args"] + ["--request-timeout-secs", "60"]
    first, other = start_gateway(slow, managed["env"]), start_gateway(slow, managed["env"])
    uris = [first.uri, other.uri]
    clients, blocks_each = 6, 3
    lock = threading.Lock()
    committed: list[list[int]] = [[] for _ in ids]
    refusals, failures = [], []

    def client(n):
        rng = random.Random(n)
        headers = {"x-api-key": managed["keys"]["app"]}
        try:
            for block in range(blocks_each):
                subset = sorted(rng.sample(range(4), rng.choice((2, 3, 4))))
                start = 100_000 * (n + 1) + 10 * block
                for _ in range(clients * blocks_each):
                    try:
                        with transaction(uris[n % 2], headers=headers) as tx:
                            for i in subset:
                                lance.write_dataset(data(2, start=start), namespace_client=tx.namespace,
                                                    table_id=ids[i], mode="append")
                        break
                    except TransactionError as e:
                        assert e.code == 14 and e.outcome == "failed", vars(e)
                        with lock:
                            refusals.append(str(e))
                else:
                    raise AssertionError(f"client {n}: a block over {subset} was refused "
                                         f"{clients * blocks_each} times")
                with lock:
                    for i in subset:
                        committed[i] += [start, start + 1]
        except Exception as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert not failures, failures
        held = [r for r in refusals if "held by batch commit" in r]
        assert not held, held[:3]
        ns = namespace(managed, "viewer")
        for i, tid in enumerate(ids):
            got = lance.dataset(namespace_client=ns, table_id=tid).to_table(columns=["id"])["id"].to_pylist()
            assert sorted(x for x in got if x >= 100_000) == sorted(committed[i]), i
        print(f"{clients * blocks_each} blocks committed, {len(refusals)} refusals on the way")
    finally:
        assert first.stop() == 0
        assert other.stop() == 0


def test_the_gateways_own_writes_order_against_a_batch_through_the_log(managed):
    """A REST insert (the gateway's own Lance commit) to a table a batch has locked waits
    for the batch: it commits after it, on the next version, and neither loses rows. Before
    the gateway's own commits went through the log, the insert took the batch's version in
    storage while the batch answered success, and the batch's rows were lost in that table."""
    ids = tables(managed, 2)
    key = {"x-api-key": managed["keys"]["app"]}
    slow = start_beside(managed, {"LANCE_GATEWAY_FAULT_BATCH_PAUSE": "locked",
                                  "LANCE_GATEWAY_FAULT_BATCH_PAUSE_MS": "3000"})
    try:
        thread, outcome = batch_in_thread(slow, managed, ids, 900)
        paused_at_fault(slow)
        status, body, _ = call(managed["gw"].uri, "POST", f"/v1/table/{enc(ids[0])}/insert",
                               ipc_stream(data(4, start=950)),
                               {**key, "content-type": "application/vnd.apache.arrow.stream"})
        thread.join(timeout=60)
        assert status == 200, body
        assert outcome and outcome[0][0] == "committed", outcome
        assert outcome[0][1] == {tuple(t): 2 for t in ids}
        assert body["version"] == 3, body
        assert versions_seen(managed, managed["gw"], ids) == [3, 2]
        assert rows_of(managed, managed["gw"], ids, 900) == [3, 3]
        ns = namespace(managed, "viewer")
        first = lance.dataset(namespace_client=ns, table_id=ids[0])
        assert first.count_rows("id >= 950 AND id < 954") == 4 and first.count_rows() == 17
        fsck_clean(managed)
    finally:
        assert slow.stop() == 0


def append_once_free(gw, headers, ids, start: int):
    """Appends one row to every table of `ids` in one batch through `gw`, retrying while a
    lock left by a batch killed before its commit point holds them (409, code 14: until the
    grace period passes and the dead batch is failed), for at most 10 seconds."""
    deadline = time.time() + 10
    while True:
        try:
            with transaction(gw.uri, headers=headers) as tx:
                for tid in ids:
                    lance.write_dataset(data(1, start=start), namespace_client=tx.namespace, table_id=tid,
                                        mode="append")
            return
        except TransactionError as e:
            assert e.code == 14 and time.time() < deadline, e
            time.sleep(0.5)


def test_gateways_killed_at_random_moments_leave_every_batch_whole(managed):
    """A batch after batch through a gateway killed a random moment after it starts: after
    each, the other gateway sees the batch in every table or in none."""
    rng = random.Random(21)
    ids = tables(managed, 3)
    survivor = start_beside(managed)
    whole, none = 0, 0
    try:
        for round_ in range(12):
            doomed = start_beside(managed)
            marker = 1000 + 10 * round_
            # Every other round the helper resends the batch to the survivor under its key:
            # then what the client is told is what happened.
            retried = round_ % 2 == 1
            thread, outcome = batch_in_thread(doomed, managed, ids, marker, then=survivor if retried else None)
            time.sleep(rng.uniform(0.05, 0.6))
            doomed.proc.send_signal(signal.SIGKILL)
            doomed.proc.wait()
            thread.join(timeout=60)
            counts = rows_of(managed, survivor, ids, marker)
            assert counts in ([3, 3, 3], [0, 0, 0]), (round_, counts, outcome)
            whole += counts == [3, 3, 3]
            none += counts == [0, 0, 0]
            seen = versions_seen(managed, survivor, ids)
            assert len(set(seen)) == 1, (round_, seen)
            if outcome and outcome[0][0] == "committed":
                assert counts == [3, 3, 3]
            if retried:
                assert outcome, (round_, "the helper did not settle the batch")
                assert (outcome[0][0] == "committed") == (counts == [3, 3, 3]), (round_, counts, outcome)
            append_once_free(survivor, {"x-api-key": managed["keys"]["app"]}, ids, marker + 5)
        fsck_clean(managed)
    finally:
        assert survivor.stop() == 0
    print(f"batches seen whole: {whole}, not at all: {none}")


def versions_listed(managed, tid, who="viewer") -> list[int]:
    listed = namespace(managed, who).list_table_versions(ln.ListTableVersionsRequest(id=tid))
    return [v.version for v in listed.versions]


def test_a_batch_deletes_old_versions_with_another_tables_new_version(managed):
    """BatchCommitTables with a delete_table_versions operation: the old versions of one
    table go in the same batch that commits another's new version; a batch that would delete
    a table's latest version, or that comes from a writer without admin rights, is refused
    whole (the other table's version is not committed, nothing is deleted)."""
    a, b = tables(managed, 2)
    for start in (100, 200):
        lance.write_dataset(data(2, start=start), namespace_client=namespace(managed, "app"), table_id=b,
                            mode="append")
    assert versions_listed(managed, b) == [1, 2, 3]
    # The app may write, not delete versions: refused whole.
    with pytest.raises(TransactionError) as refused:
        with tx_of(managed, "app") as tx:
            lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=a, mode="append")
            tx.delete_versions(b, 1, 3)
    assert (refused.value.status, refused.value.code) == (403, 15), refused.value
    # Deleting the latest version: refused whole.
    with pytest.raises(TransactionError) as refused:
        with tx_of(managed, "ops") as tx:
            lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=a, mode="append")
            tx.delete_versions(b, 2)
    assert (refused.value.status, refused.value.code) == (400, 13), refused.value
    assert "latest version" in str(refused.value)
    # Ranges that are not ranges, and an operation with no table: refused before anything.
    for op, needle in (({"id": b, "ranges": [{"start_version": 3, "end_version": 1}]}, "bad version range"),
                       ({"id": b, "ranges": []}, "at least one range"),
                       ({"ranges": [{"start_version": 1, "end_version": 2}]}, "id is required")):
        status, body, _ = call(managed["gw"].uri, "POST", "/v1/table/batch-commit",
                               {"operations": [{"delete_table_versions": op}]},
                               {"x-api-key": managed["keys"]["ops"]})
        assert (status, body["code"]) == (400, 13) and needle in body["error"], body
    assert latest(managed, a) == 1 and versions_listed(managed, b) == [1, 2, 3]
    # Both at once.
    with tx_of(managed, "ops") as tx:
        lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=a, mode="append")
        tx.delete_versions(b, 1, 3)
    assert tx.versions == {tuple(a): 2} and tx.deleted == {tuple(b): 2}
    assert versions_listed(managed, a) == [1, 2] and versions_listed(managed, b) == [3]
    ns = namespace(managed, "viewer")
    assert lance.dataset(namespace_client=ns, table_id=b).count_rows() == 14
    with pytest.raises(Exception):
        lance.dataset(namespace_client=ns, table_id=b, version=1)
    described = call(managed["gw"].uri, "POST", f"/v1/transaction/{tx.transaction_id}/describe", {},
                     {"x-api-key": managed["keys"]["ops"]})
    assert described[0] == 200 and described[1]["status"] == "Succeeded", described
    assert "deletes 1..3" in described[1]["properties"]["lance_gateway.versions"], described


def test_a_batch_that_deletes_killed_after_its_commit_point(managed):
    """A gateway killed after the commit point of a batch that commits one table's version
    and deletes another's old versions: the other gateway's next managed read finishes both
    (the new version published, the old ones gone) before answering, and fsck is clean."""
    a, b = tables(managed, 2)
    lance.write_dataset(data(2, start=100), namespace_client=namespace(managed, "app"), table_id=b, mode="append")
    survivor = start_beside(managed)
    doomed = start_beside(managed, {"LANCE_GATEWAY_FAULT_BATCH_PAUSE": "committed"})
    try:
        def batch(tx):
            lance.write_dataset(data(3, start=700), namespace_client=tx.namespace, table_id=a, mode="append")
            tx.delete_versions(b, 1, 2)

        killed_at_fault(doomed, managed, batch)
        ns = RestNamespace(uri=survivor.uri, **{"headers.x-api-key": managed["keys"]["viewer"]})
        listed = ns.list_table_versions(ln.ListTableVersionsRequest(id=b))
        assert [v.version for v in listed.versions] == [2]
        assert rows_of(managed, survivor, [a], 700) == [3]
        fsck_clean(managed)
    finally:
        if doomed.proc.poll() is None:
            doomed.proc.kill()
        assert survivor.stop() == 0


def test_gateways_killed_at_random_moments_leave_every_deleting_batch_whole(managed):
    """Batches that append to two tables and delete an old version of a third, each through
    a gateway killed a random moment after it starts: afterwards the other gateway sees the
    whole batch (both appends, the version gone) or none of it (no rows, the version there)."""
    rng = random.Random(2112)
    a, b, c = tables(managed, 3)
    for start in (100, 200, 300):
        lance.write_dataset(data(1, start=start), namespace_client=namespace(managed, "app"), table_id=c,
                            mode="append")
    survivor = start_beside(managed)
    ops = {"x-api-key": managed["keys"]["ops"]}
    outcomes = {"whole": 0, "none": 0}
    try:
        for round_ in range(8):
            doomed = start_beside(managed)
            marker = 2000 + 10 * round_
            listed = versions_listed(managed, c)
            victim = listed[0]
            assert victim < listed[-1], listed

            def batch(tx):
                for tid in (a, b):
                    lance.write_dataset(data(3, start=marker), namespace_client=tx.namespace, table_id=tid,
                                        mode="append")
                tx.delete_versions(c, victim, victim + 1)

            outcome = batch_killed(doomed, managed, batch, lambda: time.sleep(rng.uniform(0.0, 0.4)))
            counts = rows_of(managed, survivor, [a, b], marker)
            ns = RestNamespace(uri=survivor.uri, **{"headers.x-api-key": managed["keys"]["viewer"]})
            gone = victim not in [v.version for v in
                                  ns.list_table_versions(ln.ListTableVersionsRequest(id=c)).versions]
            assert (counts, gone) in (([3, 3], True), ([0, 0], False)), (round_, counts, gone, outcome)
            if outcome == ["committed"]:
                assert gone
            outcomes["whole" if gone else "none"] += 1
            # The next round's table c gets a version to delete.
            append_once_free(survivor, ops, [a, b, c], marker + 5)
        fsck_clean(managed)
    finally:
        assert survivor.stop() == 0
    print(f"deleting batches seen whole: {outcomes['whole']}, not at all: {outcomes['none']}")


def declare_once_decided(gw, headers, tid):
    """DeclareTable of `tid` through `gw`, retried while a batch killed before its commit
    point still holds the name (409, code 14: until the grace period passes and the dead
    batch is failed), for at most 10 seconds; answers the status and the error code."""
    deadline = time.time() + 10
    while True:
        status, body, _ = call(gw.uri, "POST", f"/v1/table/{enc(tid)}/declare", {"id": tid}, headers)
        if status != 409 or body.get("code") != 14:
            return status, body.get("code")
        assert time.time() < deadline, body
        time.sleep(0.5)


def test_gateways_killed_at_random_moments_leave_every_declaring_batch_whole(managed):
    """Batches that append to one table, declare a new one and deregister another, each
    through a gateway killed a random moment after it starts: afterwards the other gateway
    sees the whole batch (the rows, the new table, the old one gone) or none of it, and its
    next declare of either name settles what the dead gateway left (taken if the batch
    committed, free if not, and the other way round for the deregistered name)."""
    rng = random.Random(1701)
    (a,) = tables(managed, 1)
    olds = tables(managed, 8)
    survivor = start_beside(managed)
    ops = {"x-api-key": managed["keys"]["ops"]}
    outcomes = {"whole": 0, "none": 0}
    try:
        for round_, old in enumerate(olds):
            doomed = start_beside(managed)
            marker = 3000 + 10 * round_
            fresh = table_id(managed, f"fresh{round_}")


            def batch(tx):
                lance.write_dataset(data(3, start=marker), namespace_client=tx.namespace, table_id=a,
                                    mode="append")
                tx.declare(fresh)
                tx.deregister(old)

            outcome = batch_killed(doomed, managed, batch, lambda: time.sleep(rng.uniform(0.0, 0.2)))
            seen = (rows_of(managed, survivor, [a], marker)[0],
                    described(survivor.uri, managed, fresh)[0],
                    described(survivor.uri, managed, old)[0])
            assert seen in ((3, 200, 404), (0, 404, 200)), (round_, seen, outcome)
            whole = seen[0] == 3
            if outcome == ["committed"]:
                assert whole
            outcomes["whole" if whole else "none"] += 1
            append_once_free(survivor, ops, [a], marker + 5)
            assert declare_once_decided(survivor, ops, fresh) == ((409, 5) if whole else (200, None))
            assert declare_once_decided(survivor, ops, old) == ((200, None) if whole else (409, 5))
        fsck_clean(managed)
    finally:
        assert survivor.stop() == 0
    print(f"declaring batches seen whole: {outcomes['whole']}, not at all: {outcomes['none']}")


def test_no_tag_or_branch_from_a_version_a_deciding_batch_deletes(managed):
    """While a batch that deletes a table's version 1 decides (paused after its locks), a tag
    on version 1 and a branch from it are refused (409, code 14), and version 2 may be
    tagged; once the batch commits, version 1 is gone and the tag on 2 stands."""
    a, b = tables(managed, 2)
    lance.write_dataset(data(2, start=100), namespace_client=namespace(managed, "app"), table_id=b, mode="append")
    ops = {"x-api-key": managed["keys"]["ops"]}

    def batch(tx):
        lance.write_dataset(data(3, start=700), namespace_client=tx.namespace, table_id=a, mode="append")
        tx.delete_versions(b, 1, 2)

    slow, thread, outcome = paused_after_locks(managed, batch, lambda tx: tx.deleted)
    try:
        uri = managed["gw"].uri
        status, body, _ = call(uri, "POST", f"/v1/table/{enc(b)}/tags/create", {"tag": "keep", "version": 1}, ops)
        assert (status, body["code"]) == (409, 14), body
        status, body, _ = call(uri, "POST", f"/v1/table/{enc(b)}/branches/create",
                               {"name": "from-one", "from_version": 1}, ops)
        assert (status, body["code"]) == (409, 14), body
        status, body, _ = call(uri, "POST", f"/v1/table/{enc(b)}/tags/create", {"tag": "two", "version": 2}, ops)
        assert status == 200, body
        thread.join(timeout=60)
        assert outcome == [{tuple(b): 1}], outcome
        assert versions_listed(managed, b) == [2]
        status, body, _ = call(uri, "POST", f"/v1/table/{enc(b)}/tags/list", {}, ops)
        assert status == 200 and set(body["tags"]) == {"two"}, body
    finally:
        thread.join(timeout=60)
        assert slow.stop() == 0


def listed_names(managed, who="viewer") -> set[str]:
    """The tables ListTables shows in the fixture's namespace (declared ones too)."""
    listed = namespace(managed, who).list_tables(ln.ListTablesRequest(id=managed["base"]))
    return set(listed.tables)


def described(gw_uri, managed, tid, who="viewer"):
    """DescribeTable's status and body through the gateway at `gw_uri`."""
    status, body, _ = call(gw_uri, "POST", f"/v1/table/{enc(tid)}/describe", {"id": tid},
                           {"x-api-key": managed["keys"][who]})
    return status, body


def test_a_batch_declares_and_deregisters_tables_with_a_version(managed):
    """BatchCommitTables with declare_table and deregister_table beside a pylance append:
    the declared table exists (with its properties, and takes pylance's first write), the
    deregistered one is gone from describe and listings with its data left in place, and
    the appended rows are there, all from one transaction DescribeTransaction knows. A
    block one of whose operations is refused commits none of them."""
    a, old = tables(managed, 2)
    fresh = table_id(managed, "fresh")
    objects = Objects(managed)
    old_location = describe(managed, old)["location"]
    # The app may write and declare, not deregister: refused whole.
    with pytest.raises(TransactionError) as refused:
        with tx_of(managed, "app") as tx:
            lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=a, mode="append")
            tx.declare(fresh)
            tx.deregister(old)
    assert (refused.value.status, refused.value.code) == (403, 15), refused.value
    assert latest(managed, a) == 1
    assert described(managed["gw"].uri, managed, fresh)[0] == 404
    assert old[-1] in listed_names(managed) and fresh[-1] not in listed_names(managed)
    # Declaring a table that exists: refused whole (409, TableAlreadyExists).
    with pytest.raises(TransactionError) as refused:
        with tx_of(managed, "ops") as tx:
            tx.declare(fresh)
            tx.declare(a)
    assert (refused.value.status, refused.value.code) == (409, 5), refused.value
    assert described(managed["gw"].uri, managed, fresh)[0] == 404
    # All three at once.
    with tx_of(managed, "ops") as tx:
        lance.write_dataset(data(3, start=50), namespace_client=tx.namespace, table_id=a, mode="append")
        tx.declare(fresh, properties={"owner": "pipeline"})
        tx.deregister(old)
    assert tx.versions == {tuple(a): 2}
    assert tx.declared[tuple(fresh)] and tx.deregistered == {tuple(old): old_location}
    status, body = described(managed["gw"].uri, managed, fresh)
    assert status == 200 and body["location"] == tx.declared[tuple(fresh)], body
    assert body["properties"]["owner"] == "pipeline", body
    assert described(managed["gw"].uri, managed, old)[0] == 404
    names = listed_names(managed)
    assert fresh[-1] in names and old[-1] not in names and a[-1] in names
    # A deregister leaves the data where it was.
    assert final_name(1) in objects.versions_folder(old_location)
    # The declared table is an ordinary declared one: pylance writes its first version
    # (through describe, as into any declared table).
    ns = namespace(managed, "app")
    lance.write_dataset(data(4), namespace_client=ns, table_id=fresh, mode="overwrite")
    assert lance.dataset(namespace_client=namespace(managed, "viewer"), table_id=fresh).count_rows() == 4
    assert lance.dataset(namespace_client=namespace(managed, "viewer"), table_id=a).count_rows() == 13
    status, body, _ = call(managed["gw"].uri, "POST", f"/v1/transaction/{tx.transaction_id}/describe", {},
                           {"x-api-key": managed["keys"]["ops"]})
    assert status == 200 and body["status"] == "Succeeded", body
    summary = body["properties"]["lance_gateway.versions"]
    assert "declares" in summary and "deregisters" in summary, summary


def test_a_deciding_batchs_declare_and_deregister_are_not_seen_until_it_commits(managed):
    """While a batch that declares one table and deregisters another decides (paused after
    its locks on another gateway), describe and ListTables show neither change and a plain
    declare of the same name is refused (409); once it commits both show at once."""
    (old,) = tables(managed, 1)
    fresh = table_id(managed, "fresh")
    ops = {"x-api-key": managed["keys"]["ops"]}

    def batch(tx):
        tx.declare(fresh)
        tx.deregister(old)

    slow, thread, outcome = paused_after_locks(managed, batch, lambda tx: (tx.declared, tx.deregistered))
    try:
        uri = managed["gw"].uri
        assert described(uri, managed, fresh)[0] == 404
        assert described(uri, managed, old)[0] == 200
        names = listed_names(managed)
        assert old[-1] in names and fresh[-1] not in names
        status, body, _ = call(uri, "POST", f"/v1/table/{enc(fresh)}/declare", {"id": fresh}, ops)
        assert status == 409, body
        thread.join(timeout=60)
        assert outcome and isinstance(outcome[0], tuple), outcome
        status, body = described(uri, managed, fresh)
        assert status == 200 and body["location"] == outcome[0][0][tuple(fresh)], body
        assert described(uri, managed, old)[0] == 404
        names = listed_names(managed)
        assert fresh[-1] in names and old[-1] not in names
    finally:
        thread.join(timeout=60)
        assert slow.stop() == 0


@pytest.mark.parametrize("step", ["locked", "committed"])
def test_a_gateway_killed_inside_a_batch_that_declares_and_deregisters(managed, step):
    """A gateway SIGKILLed at `step` of a batch that appends to one table, declares another
    and deregisters a third. Killed after the commit point, the other gateway sees all three
    at once (describe, listings, rows), and its next declare of either name finishes what
    the dead one left; killed before, it sees none of them and, past the grace period, the
    names are as they were. fsck is clean after."""
    a, old = tables(managed, 2)
    fresh = table_id(managed, "fresh")
    survivor = start_beside(managed)
    doomed = start_beside(managed, {"LANCE_GATEWAY_FAULT_BATCH_PAUSE": step})
    try:
        def batch(tx):
            lance.write_dataset(data(3, start=700), namespace_client=tx.namespace, table_id=a, mode="append")
            tx.declare(fresh)
            tx.deregister(old)

        killed_at_fault(doomed, managed, batch)
        committed = step == "committed"
        ops = {"x-api-key": managed["keys"]["ops"]}
        assert described(survivor.uri, managed, fresh)[0] == (200 if committed else 404)
        assert described(survivor.uri, managed, old)[0] == (404 if committed else 200)
        names = listed_names(managed)
        assert (fresh[-1] in names, old[-1] in names) == (committed, not committed)
        assert rows_of(managed, survivor, [a], 700) == ([3] if committed else [0])
        if committed:
            # The next declare of each name finishes the dead gateway's work.
            status, body, _ = call(survivor.uri, "POST", f"/v1/table/{enc(fresh)}/declare", {"id": fresh}, ops)
            assert (status, body.get("code")) == (409, 5), body
            status, body, _ = call(survivor.uri, "POST", f"/v1/table/{enc(old)}/declare", {"id": old}, ops)
            assert status == 200, body
        else:
            # Past the grace period the dead batch is failed: the appended table's next read
            # drops its lock, and the names are free to change.
            time.sleep(3.5)
            assert rows_of(managed, survivor, [a], 700) == [0]
            status, body, _ = call(survivor.uri, "POST", f"/v1/table/{enc(fresh)}/declare", {"id": fresh}, ops)
            assert status == 200, body
            status, body, _ = call(survivor.uri, "POST", f"/v1/table/{enc(old)}/deregister", {"id": old}, ops)
            assert status == 200, body
        fsck_clean(managed)
    finally:
        if doomed.proc.poll() is None:
            doomed.proc.kill()
        assert survivor.stop() == 0
