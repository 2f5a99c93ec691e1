"""Several Lance tables committed together through lance-gateway.

`transaction()` hands pylance a namespace client that records each table's commit
(CreateTableVersion) instead of sending it; leaving the block sends every recorded commit
(and every deletion of old versions, declare and deregister asked for with
`Transaction.delete_versions`, `Transaction.declare` and `Transaction.deregister`) as one
BatchCommitTables, which the gateway makes visible all at once or not at all.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import threading
import urllib.error
import urllib.request
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

from lance.namespace import RestNamespace
from lance_namespace import LanceNamespace

__all__ = ["Transaction", "TransactionError", "transaction"]


class TransactionError(Exception):
    """The gateway refused the batch (nothing of it is visible), or could not be reached.

    `status` is the HTTP status (0 when no answer came) and `code` the Lance Namespace
    error code: 14 (ConcurrentModification) means another writer got there first, and the
    whole block may be run again.
    """

    def __init__(self, message: str, status: int = 0, code: Optional[int] = None):
        super().__init__(message)
        self.status = status
        self.code = code


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

    def __init__(self, uri: str, headers: Optional[Dict[str, str]] = None, timeout: float = 60.0,
                 **properties: str):
        self.uri = uri.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
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

    def _record(self, body: Dict[str, Any], kind: str = "create_table_version") -> None:
        key = (tuple(body["id"]), body.get("branch") or "main")
        with self._lock:
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

    def commit(self) -> None:
        """Sends the recorded commits as one BatchCommitTables (nothing when none)."""
        with self._lock:
            pending = list(self._pending.values())
        if not pending:
            return
        body = json.dumps({"operations": pending}).encode()
        request = urllib.request.Request(
            f"{self.uri}/v1/table/batch-commit", data=body, method="POST",
            headers={"content-type": "application/json", **self.headers})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                result = json.loads(answer.read())
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                error = json.loads(raw)
            except ValueError:
                error = {"error": raw.decode(errors="replace")}
            raise TransactionError(
                f"the batch commit was refused: {error.get('error')}", e.code, error.get("code")
            ) from None
        except (urllib.error.URLError, OSError) as e:
            raise TransactionError(f"could not reach the gateway: {e}") from e
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
def transaction(uri: str, headers: Optional[Dict[str, str]] = None, **properties: str) -> Iterator[Transaction]:
    """A block whose pylance writes (through `tx.namespace`) become visible together when it
    ends, or never if it raises. `headers` are sent with every request (an API key, a
    bearer token); other keyword arguments are RestNamespace properties."""
    tx = Transaction(uri, headers, **properties)
    yield tx
    tx.commit()
