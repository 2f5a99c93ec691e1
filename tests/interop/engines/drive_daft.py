"""Daft's driver for tests/interop/test_daft.py, run with venv-daft's python (daft 0.7.26,
daft-lance 0.6.0). Every call addresses a table as a Daft user does through a Lance
Namespace: `namespace_impl="rest"`, `namespace_properties={"uri": <gateway>}`, `table_id`.
Nothing else is passed: storage options (and, on S3, keys) are what the gateway vends.

Operations: write(uri, table_id, columns, mode) -> Daft's write statistics;
read(uri, table_id, where=None) -> {column: values} in Daft's row order;
compact(uri, table_id) -> compaction metrics; create_scalar_index(uri, table_id, column,
index_type, name)."""

import driver_loop

answers = driver_loop.take_stdout()

import daft  # noqa: E402
import daft_lance  # noqa: E402


def where_(uri: str, table_id: list[str]) -> dict:
    return {"namespace_impl": "rest", "namespace_properties": {"uri": uri}, "table_id": table_id}


def write(uri: str, table_id: list[str], columns: dict, mode: str) -> dict:
    stats = daft_lance.write_lance(daft.from_pydict(columns), mode=mode, **where_(uri, table_id))
    return stats.to_pydict()


def read(uri: str, table_id: list[str], where: str | None = None) -> dict:
    df = daft_lance.read_lance(**where_(uri, table_id))
    if where is not None:
        df = df.where(daft.sql_expr(where))
    return df.to_pydict()


def compact(uri: str, table_id: list[str]) -> dict | None:
    metrics = daft_lance.compact_files(**where_(uri, table_id))
    if metrics is None:
        return None
    return {k: getattr(metrics, k) for k in ("fragments_removed", "fragments_added", "files_removed", "files_added")}


def create_scalar_index(uri: str, table_id: list[str], column: str, index_type: str, name: str) -> None:
    daft_lance.create_scalar_index(column=column, index_type=index_type, name=name, **where_(uri, table_id))


driver_loop.serve(answers, {"write": write, "read": read, "compact": compact,
                            "create_scalar_index": create_scalar_index})
