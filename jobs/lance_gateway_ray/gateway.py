"""How a job reaches the gateway that submitted it: the table through the Lance Namespace
REST routes (its location and storage options as the gateway vends them to any client, so
never broader than that table's), and its own transaction record, read before it commits."""

import json
import os
import time
import urllib.request
from dataclasses import dataclass, replace

import lance
import lance_namespace

RESULT = "LANCE_GATEWAY_RESULT "


class Stopped(Exception):
    """The gateway no longer wants the work committed: its transaction was canceled, or it
    failed (the gateway lost the table's lease)."""


@dataclass(frozen=True)
class Job:
    uri: str
    table: list
    transaction: str
    options: dict
    api_key: str | None = None

    @staticmethod
    def from_environment() -> "Job":
        env = os.environ
        return Job(
            uri=env["LANCE_GATEWAY_URI"].rstrip("/"),
            table=json.loads(env["LANCE_GATEWAY_TABLE"]),
            transaction=env["LANCE_GATEWAY_TRANSACTION"],
            options=json.loads(env.get("LANCE_GATEWAY_OPTIONS") or "{}"),
            api_key=env.get("LANCE_GATEWAY_API_KEY") or None,
        )

    def namespace(self):
        properties = {"uri": self.uri}
        if self.api_key:
            properties["headers.x-api-key"] = self.api_key
        return lance_namespace.connect("rest", properties)

    def open(self, version=None) -> lance.LanceDataset:
        """The table as any client opens it through the gateway (managed when its versions
        are), at `version` or its latest."""
        return lance.dataset(namespace_client=self.namespace(), table_id=self.table, version=version)

    def vended(self) -> tuple[str, dict]:
        """The table's location and the storage options the gateway vends beside it."""
        answer = self.namespace().describe_table(lance_namespace.DescribeTableRequest(id=self.table))
        return answer.location, dict(answer.storage_options or {})

    def status(self) -> str:
        """The job's transaction status as the gateway records it."""
        request = urllib.request.Request(
            f"{self.uri}/v1/transaction/{urllib.request.quote(self.transaction, safe='')}/describe",
            data=b"{}",
            method="POST",
            headers={"content-type": "application/json"},
        )
        if self.api_key:
            request.add_header("x-api-key", self.api_key)
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer)["status"]

    def may_commit(self) -> None:
        """Raises `Stopped` unless the gateway still runs this job. (The gateway's fault
        injection for tests, a pause before a maintenance commit, is passed on and taken
        here.)"""
        pause = int(os.environ.get("LANCE_GATEWAY_FAULT_PAUSE_BEFORE_COMMIT_MS") or 0)
        if pause:
            print(f"fault injection: pausing {pause} ms before committing", flush=True)
            time.sleep(pause / 1000)
        status = self.status()
        if status != "Running":
            raise Stopped(f"transaction {self.transaction} is {status}: not committing")


def try_reading_elsewhere(job: Job) -> None:
    """The test suite's probe of a job's reach (`LANCE_GATEWAY_FAULT_READ_ELSEWHERE`, a table
    id in JSON, set only there): with the storage options vended for the job's table, reads
    its own table and the other table's location, and prints what each answered."""
    other = os.environ.get("LANCE_GATEWAY_FAULT_READ_ELSEWHERE")
    if not other:
        return
    location, options = job.vended()
    elsewhere, _ = replace(job, table=json.loads(other)).vended()
    print(f"fault injection: the job's storage options carry {sorted(options)}", flush=True)
    for what, uri in (("its own table", location), ("elsewhere", elsewhere)):
        try:
            rows = lance.dataset(uri, storage_options=options).count_rows()
            print(f"fault injection: reading {what} ({uri}): read {rows} rows", flush=True)
        except Exception as e:  # noqa: BLE001 (what refused it is the answer)
            print(f"fault injection: reading {what} ({uri}): refused: {e}", flush=True)


def report(result: dict) -> None:
    print(RESULT + json.dumps(result, sort_keys=True), flush=True)
