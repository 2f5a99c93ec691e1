"""Several Lance tables committed together through lance-gateway.

`transaction()` hands pylance a namespace client that records each table's commit
(CreateTableVersion) instead of sending it; leaving the block sends every recorded commit
(and every deletion of old versions, declare and deregister asked for with
`Transaction.delete_versions`, `Transaction.declare` and `Transaction.deregister`) as one
BatchCommitTables, which the gateway makes visible all at once or not at all.

Each block names its batch with an idempotency key of its own. When the answer is lost (the
connection drops, the gateway restarts, or the gateway says the outcome is unknown), the
helper sends the same batch again under the same key, to whichever gateway answers, and the
gateway answers the first attempt's outcome: the block is applied once, and
`TransactionError` is raised only with the batch's settled outcome.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple, Union

from lance.namespace import RestNamespace
from lance_namespace import LanceNamespace

__all__ = ["Transaction", "TransactionError", "transaction"]


class TransactionError(Exception):
    """The block did not commit, or could not be committed as asked.

    `status` is the HTTP status (0 when no answer came) and `code` the Lance Namespace
    error code. 14 (ConcurrentModification) means another writer got there first: nothing of
    the block is visible, and running the whole block again (a new block, which writes its
    data again) may succeed. `outcome` is "failed" when the gateway settled that the batch
    did not commit, "refused" when the block was refused before anything was sent, and
    "unknown" when no gateway could say within the helper's patience (`retry_for`):
    `transaction_id` then names the batch, and DescribeTransaction tells how it ended.
    """

    def __init__(self, message: str, status: int = 0, code: Optional[int] = None,
                 outcome: str = "failed", transaction_id: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.outcome = outcome
        self.transaction_id = transaction_id


def _plain(request: Any) -> Dict[str, Any]:
    """A request as a dict, whichever form pylance passed it in."""
    if isinstance(request, dict):
        body = dict(request)
    elif hasattr(request, "model_dump"):
        body = request.model_dump()
    else:
        body = request.to_dict()
    return {k: v for k, v in body.items() if v is not None and k not in ("identity", "context")}


class _Recording(LanceNamespace):
    """What pylance talks to inside the block: the gateway, except that commits are kept."""

    def __init__(self, tx: "Transaction"):
        self._tx = tx

    def namespace_id(self) -> str:
        return f"lance-gateway transaction over {self._tx._rest.namespace_id()}"

    # What pylance asks before it writes a table: the answer says whether the table's
    # commits come through the catalog. A table whose do not would be committed by pylance
    # at once, outside the block, so the block is refused before anything is written.
    def describe_table(self, request: Any) -> Any:
        return self._tx._managed(request, self._tx._rest.describe_table(request))

    def declare_table(self, request: Any) -> Any:
        return self._tx._managed(request, self._tx._rest.declare_table(request))

    def create_table_version(self, request: Any) -> Any:
        body = _plain(request)
        self._tx._record(body)
        version = {
            "version": body["version"],
            "manifest_path": body["manifest_path"],
        }
        if body.get("manifest_size") is not None:
            version["manifest_size"] = body["manifest_size"]
        if isinstance(request, dict):
            return {"version": version}
        from lance_namespace_urllib3_client.models import CreateTableVersionResponse

        return CreateTableVersionResponse.from_dict({"version": version})


def _forward(name: str):
    def method(self, *args, **kwargs):
        return getattr(self._tx._rest, name)(*args, **kwargs)

    method.__name__ = name
    return method


# Everything but the commit goes to the gateway as it would without the block.
for _name, _ in inspect.getmembers(LanceNamespace, inspect.isfunction):
    if not _name.startswith("_") and _name not in _Recording.__dict__:
        setattr(_Recording, _name, _forward(_name))
_Recording.__abstractmethods__ = frozenset()


class Transaction:
    """One block's commits. `namespace` is the client to give pylance; after the block,
    `transaction_id` names the batch (DescribeTransaction knows it), `versions` maps each
    table id (a tuple) to the version it got, `deleted` each table whose old versions the
    block deleted to how many went, `declared` each table it declared to its location, and
    `deregistered` each table it deregistered to the location it had."""

    def __init__(self, uri: Union[str, Sequence[str]], headers: Optional[Dict[str, str]] = None,
                 timeout: float = 60.0, retry_for: float = 120.0, **properties: str):
        # One gateway, or several serving the same warehouse: pylance talks to the first;
        # a batch whose answer was lost is sent again to the next, in turn.
        self.uris = [u.rstrip("/") for u in ([uri] if isinstance(uri, str) else uri)]
        self.uri = self.uris[0]
        self.headers = dict(headers or {})
        self.timeout = timeout
        # How long the helper keeps resending a batch whose answer was lost.
        self.retry_for = retry_for
        # The block's idempotency key: every send of its batch carries it.
        self.key = f"lgtx-{uuid.uuid4().hex}"
        self._refused: Optional[TransactionError] = None
        props = {f"headers.{k}": v for k, v in self.headers.items()}
        props.update(properties)
        self._rest = RestNamespace(uri=self.uri, **props)
        self._lock = threading.Lock()
        self._pending: Dict[Tuple[Tuple[str, ...], str], Dict[str, Any]] = {}
        self.namespace: LanceNamespace = _Recording(self)
        self.transaction_id: Optional[str] = None
        self.versions: Dict[Tuple[str, ...], int] = {}
        self.deleted: Dict[Tuple[str, ...], int] = {}
        self.declared: Dict[Tuple[str, ...], str] = {}
        self.deregistered: Dict[Tuple[str, ...], str] = {}

    def _managed(self, request: Any, answer: Any) -> Any:
        """`answer` (a table's description) passed on if the table's commits come through
        the gateway; otherwise the block is refused, and stays refused."""
        managed = answer.get("managed_versioning") if isinstance(answer, dict) else getattr(
            answer, "managed_versioning", None)
        if managed is not True:
            table = _plain(request).get("id")
            error = TransactionError(
                f"table {table} is not under managed versioning, so its writes would be "
                "committed at once, outside the block, and the block could not be atomic: "
                "start the gateway with `--managed-versioning true` (or `managed_versioning = "
                "true` in its config file); nothing of the block was written",
                code=13, outcome="refused")
            with self._lock:
                self._refused = self._refused or error
            raise error
        return answer

    def _record(self, body: Dict[str, Any], kind: str = "create_table_version") -> None:
        key = (tuple(body["id"]), body.get("branch") or "main")
        with self._lock:
            if self._refused is not None:
                raise self._refused
            if self.transaction_id is not None:
                raise TransactionError("this transaction has already been committed")
            if key in self._pending:
                raise TransactionError(
                    f"table {list(key[0])} is already changed in this transaction: "
                    "write, declare, deregister or delete the versions of each table once "
                    "per transaction"
                )
            self._pending[key] = {kind: body}

    def delete_versions(self, table_id: Sequence[str], start: int, end: int = -1,
                        branch: Optional[str] = None) -> None:
        """Deletes the table's versions `start` up to `end` (excluded; -1 for no end) with
        the block's commits: they go when the block's writes become visible, or not at all.
        The gateway refuses the whole block if this would delete the table's latest or a
        tagged version. Needs admin access to the table."""
        body: Dict[str, Any] = {"id": list(table_id),
                                "ranges": [{"start_version": start, "end_version": end}]}
        if branch is not None:
            body["branch"] = branch
        self._record(body, "delete_table_versions")

    def declare(self, table_id: Sequence[str], location: Optional[str] = None,
                properties: Optional[Dict[str, str]] = None) -> None:
        """Declares the table (a name and a data folder, no data) with the block's commits:
        it exists for everyone from the moment they become visible, or never. Its data is
        written after the block, like any declared table's. Needs write access."""
        # Credentials are not asked for: the answer's storage options are not kept here.
        body: Dict[str, Any] = {"id": list(table_id), "vend_credentials": False}
        if location is not None:
            body["location"] = location
        if properties:
            body["properties"] = dict(properties)
        self._record(body, "declare_table")

    def deregister(self, table_id: Sequence[str]) -> None:
        """Deregisters the table (its data stays where it is) with the block's commits: it
        is gone for everyone from the moment they become visible, or not at all. Needs admin
        access."""
        self._record({"id": list(table_id)}, "deregister_table")

    def _send(self, body: bytes, uri: str) -> Tuple[int, Dict[str, Any]]:
        """One send of the batch to the gateway at `uri`: the answer's status and JSON body
        (status 0 when no answer came)."""
        request = urllib.request.Request(
            f"{uri}/v1/table/batch-commit", data=body, method="POST",
            headers={"content-type": "application/json", "idempotency-key": self.key,
                     **self.headers})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                error = json.loads(raw)
            except ValueError:
                error = {"error": raw.decode(errors="replace")}
            return e.code, error
        except (urllib.error.URLError, OSError) as e:
            return 0, {"error": f"could not reach the gateway: {e}"}

    def commit(self) -> None:
        """Sends the recorded commits as one BatchCommitTables (nothing when none). An
        answer that does not settle the batch (none came, the gateway failed, or it says
        the outcome is unknown) is followed by the same batch under the same key until one
        does, for up to `retry_for` seconds: the batch is applied once whatever happens."""
        with self._lock:
            if self._refused is not None:
                raise self._refused
            pending = list(self._pending.values())
        if not pending:
            return
        body = json.dumps({"operations": pending}).encode()
        deadline = time.monotonic() + self.retry_for
        pause = 0.1
        sends = 0
        while True:
            status, result = self._send(body, self.uris[sends % len(self.uris)])
            sends += 1
            # A failure the gateway recorded against the batch (it names the batch and does
            # not say the outcome is unknown) is settled, whatever its status.
            recorded = bool(result.get("transaction_id")) and result.get("outcome") != "unknown"
            settled = status != 0 and (status < 500 or recorded)
            if settled or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
        if status != 200:
            unknown = status == 0 or (status >= 500 and result.get("outcome") == "unknown") or (
                status >= 500 and not result.get("transaction_id"))
            raise TransactionError(
                f"the batch commit {'may or may not have committed' if unknown else 'was refused'}"
                f": {result.get('error')}", status, result.get("code"),
                outcome="unknown" if unknown else "failed",
                transaction_id=result.get("transaction_id"))
        self.transaction_id = result.get("transaction_id")
        for sent, got in zip(pending, result.get("results", [])):
            if "declare_table" in sent:
                table = tuple(sent["declare_table"]["id"])
                self.declared[table] = (got.get("declare_table") or {}).get("location", "")
                continue
            if "deregister_table" in sent:
                table = tuple(sent["deregister_table"]["id"])
                self.deregistered[table] = (got.get("deregister_table") or {}).get("location", "")
                continue
            if "delete_table_versions" in sent:
                table = tuple(sent["delete_table_versions"]["id"])
                self.deleted[table] = (got.get("delete_table_versions") or {}).get("deleted_count", 0)
                continue
            sent = sent["create_table_version"]
            version = (got.get("create_table_version") or {}).get("version") or {}
            self.versions[tuple(sent["id"])] = version.get("version", sent["version"])


@contextlib.contextmanager
def transaction(uri: Union[str, Sequence[str]], headers: Optional[Dict[str, str]] = None,
                **properties: Any) -> Iterator[Transaction]:
    """A block whose pylance writes (through `tx.namespace`) become visible together when it
    ends, or never if it raises. `uri` is a gateway, or several serving one warehouse (a
    batch whose answer was lost is resent to the next). `headers` are sent with every
    request (an API key, a bearer token); `timeout` (per send, seconds) and `retry_for`
    (how long a batch whose answer was lost is resent, seconds; 0 sends it once) are the
    helper's; other keyword arguments are RestNamespace properties."""
    tx = Transaction(uri, headers, **properties)
    try:
        yield tx
    except BaseException as e:
        # pylance hands a namespace client's error back in its own type: the refusal is
        # raised as the helper's, with what pylance made of it as its cause.
        if tx._refused is not None and e is not tx._refused:
            raise tx._refused from e
        raise
    tx.commit()
