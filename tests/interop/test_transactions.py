"""Index builds as transactions (spec §2.8), through pylance's REST client: a build that
takes longer than its request may wait answers its `transaction_id` and goes on;
DescribeTransaction follows it to its outcome, AlterTransaction stops it or labels it, and a
build whose gateway was killed is reported as such by the next one. With API keys and
grants, on the local warehouse and on SeaweedFS."""

import io
import os
import signal
import time

import lance_namespace_urllib3_client.models as m
import numpy as np
import pyarrow as pa
import pytest
from lance.namespace import RestNamespace

from conftest import start_gateway, unique
from security import call, keyed_gateway

DIM = 64


def vectors(n: int) -> bytes:
    rng = np.random.default_rng(5)
    table = pa.table({
        "id": pa.array(range(n), pa.int64()),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * DIM, dtype=np.float32)), DIM),
    })
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


# A build of this index on this table takes about 14 s on these machines (2 cores); the
# gateways below let a request wait 3.75 s for it.
BIG = 80_000


def slow_index(tid, name: str):
    return m.CreateTableIndexRequest(id=tid, column="vec", index_type="IVF_PQ", name=name, num_partitions=32,
                                     num_sub_vectors=16, max_iterations=500, sample_rate=4096)


@pytest.fixture(scope="module", params=["local", "seaweedfs"])
def quick(request):
    """Requests may take 5 s (an index build's request waits 3.75 s for it); a gateway is
    taken for stopped after 2 s without a refresh."""
    with keyed_gateway(request, "lg-txn-", ("--request-timeout-secs", "5", "--recovery-grace-secs", "2")) as gw:
        yield gw


def namespace(quick, who: str, uri: str | None = None) -> RestNamespace:
    return RestNamespace(uri=uri or quick["gw"].uri, **{"headers.x-api-key": quick["keys"][who]})


def new_table(quick, name: str, rows: int):
    tid = quick["base"] + [unique(name)]
    namespace(quick, "app").create_table(m.CreateTableRequest(id=tid), vectors(rows))
    return tid


def describe(ns, txn: str):
    return ns.describe_transaction(m.DescribeTransactionRequest(id=[txn]))


def wait_for(ns, txn: str, done=("Succeeded", "Failed", "Canceled"), seconds: float = 300):
    deadline = time.time() + seconds
    while time.time() < deadline:
        got = describe(ns, txn)
        if got.status in done:
            return got
        time.sleep(0.2)
    raise AssertionError(f"transaction {txn} did not finish: {got.status}")


def index_names(ns, tid) -> list[str]:
    return [i.index_name for i in ns.list_table_indices(m.ListTableIndicesRequest(id=tid)).indexes]


def patient_args(quick) -> list[str]:
    """The fixture gateway's arguments with the default request timeout (a build's request
    waits 22.5 s): a busy CI host once took longer than the fixture's 3.75 s to build a
    300-row BTREE, and this test is about a build that finishes within the wait."""
    args = list(quick["args"])
    at = args.index("--request-timeout-secs")
    del args[at:at + 2]
    return args


def test_a_quick_build_answers_when_committed(quick):
    patient = start_gateway(patient_args(quick), quick["env"])
    try:
        ns = namespace(quick, "app", patient.uri)
        tid = new_table(quick, "small", 300)
        answer = ns.create_table_index(m.CreateTableIndexRequest(id=tid, column="id", index_type="BTREE"))
        assert answer.transaction_id
        assert index_names(ns, tid) == ["id_idx"]
        got = describe(ns, answer.transaction_id)
        assert got.status == "Succeeded"
        assert got.properties["lance_gateway.operation"] == "create_index"
        assert got.properties["lance_gateway.target"] == "id_idx"
        # A build that fails within the wait answers its error, as before.
        with pytest.raises(Exception, match="not in the table"):
            ns.create_table_index(m.CreateTableIndexRequest(id=tid, column="nope", index_type="BTREE"))
    finally:
        assert patient.stop() == 0


def test_a_long_build_answers_its_transaction_and_goes_on(quick):
    ns = namespace(quick, "app")
    tid = new_table(quick, "long", BIG)
    answer = ns.create_table_index(slow_index(tid, "vec_long"))
    txn = answer.transaction_id
    assert txn
    assert describe(ns, txn).status == "Running"
    assert "vec_long" not in index_names(ns, tid)
    # A reader may follow it.
    assert describe(namespace(quick, "viewer"), txn).status in ("Running", "Succeeded")
    assert wait_for(ns, txn).status == "Succeeded"
    assert "vec_long" in index_names(ns, tid)


def test_a_running_build_can_be_stopped(quick):
    ns = namespace(quick, "app")
    tid = new_table(quick, "stop", BIG)
    txn = ns.create_table_index(slow_index(tid, "vec_stop")).transaction_id
    # pylance 14.0.2's client drops the actions (it sends `{}`: its Python side dumps
    # snake_case names its Rust side does not read), so alters go out as raw HTTP here.
    cancel = {"actions": [{"setStatusAction": {"status": "Canceled"}}]}
    # a reader may not stop it
    status, body, _ = call(quick["gw"].uri, "POST", f"/v1/transaction/{txn}/alter", cancel,
                           {"x-api-key": quick["keys"]["viewer"]})
    assert (status, body["code"]) == (403, 15), body
    status, altered, _ = call(quick["gw"].uri, "POST", f"/v1/transaction/{txn}/alter", cancel,
                              {"x-api-key": quick["keys"]["app"]})
    assert status == 200, altered
    # The stop is asked for; the status stays the truth until the build has stopped.
    assert altered["status"] == "Running"
    assert altered["properties"]["lance_gateway.cancel_requested"] == "true"
    ended = wait_for(ns, txn)
    assert ended.status == "Canceled", ended.properties.get("lance_gateway.error")
    assert "vec_stop" not in index_names(ns, tid)
    # a finished transaction cannot be stopped again
    status, body, _ = call(quick["gw"].uri, "POST", f"/v1/transaction/{txn}/alter", cancel,
                           {"x-api-key": quick["keys"]["app"]})
    assert (status, body["code"]) == (409, 14), body


def test_properties_and_bad_alters(quick):
    ns = namespace(quick, "app")
    tid = new_table(quick, "props", 100)
    txn = ns.create_table_index(m.CreateTableIndexRequest(id=tid, column="id", index_type="BTREE")).transaction_id
    uri = quick["gw"].uri

    def alter(actions, who="app", target=txn):
        return call(uri, "POST", f"/v1/transaction/{target}/alter", {"actions": actions},
                    {"x-api-key": quick["keys"][who]})

    status, body, _ = alter([{"setPropertyAction": {"key": "owner", "value": "ml", "mode": "Overwrite"}},
                             {"setPropertyAction": {"key": "ticket", "value": "42"}}])
    assert status == 200 and body["properties"]["owner"] == "ml" and body["properties"]["ticket"] == "42", body
    # all or nothing: the second action fails, so the first is not applied either
    status, body, _ = alter([{"unsetPropertyAction": {"key": "ticket", "mode": "Fail"}},
                             {"setPropertyAction": {"key": "owner", "value": "x", "mode": "Fail"}}])
    assert (status, body["code"]) == (409, 14), body
    assert describe(ns, txn).properties["ticket"] == "42"
    status, body, _ = alter([{"setPropertyAction": {"key": "owner", "value": "x", "mode": "Skip"}},
                             {"unsetPropertyAction": {"key": "ticket"}}])
    assert status == 200 and body["properties"]["owner"] == "ml" and "ticket" not in body["properties"], body
    for bad in ([], [{"setStatusAction": {"status": "Succeeded"}}],
                [{"setPropertyAction": {"key": "lance_gateway.target", "value": "x"}}],
                [{"setPropertyAction": {"key": "k", "value": "v", "mode": "Sometimes"}}],
                [{"setStatusAction": {"status": "Canceled"}, "unsetPropertyAction": {"key": "k"}}]):
        status, body, _ = alter(bad)
        assert (status, body["code"]) == (400, 13), (bad, body)
    # Unknown ids, and transactions of tables the caller may not see, are not found.
    for who, target in (("app", "nope"), ("app", "0000000000000-" + "0" * 32), ("nobody", txn)):
        status, body, _ = call(uri, "POST", f"/v1/transaction/{target}/describe", {},
                               {"x-api-key": quick["keys"][who]})
        assert (status, body["code"]) == (404, 10), (who, target, body)
    status, body, _ = alter([{"setPropertyAction": {"key": "k", "value": "v"}}], who="viewer")
    assert (status, body["code"]) == (403, 15), body


def test_a_build_whose_gateway_was_killed_is_reported(quick):
    """A second gateway over the same warehouse builds, and is killed mid-build: the first
    reports the build Failed once the grace period has passed, and nothing was committed."""
    other = start_gateway(quick["args"], quick["env"])
    try:
        ns_other = namespace(quick, "app", other.uri)
        tid = new_table(quick, "killed", BIG)
        txn = ns_other.create_table_index(slow_index(tid, "vec_killed")).transaction_id
        os.kill(other.proc.pid, signal.SIGKILL)
        other.proc.wait()
        ns = namespace(quick, "app")
        assert describe(ns, txn).status == "Running"
        got = wait_for(ns, txn, seconds=30)
        assert got.status == "Failed" and "stopped" in got.properties["lance_gateway.error"]
        assert "vec_killed" not in index_names(ns, tid)
    finally:
        if other.proc.poll() is None:
            other.proc.kill()
