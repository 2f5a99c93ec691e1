"""DuckDB's driver for tests/interop/test_duckdb.py, run with venv-duckdb's python (duckdb
1.5.5 and its Lance extension). A user's session: load the extension, ATTACH a namespace of
the gateway, run SQL. Each `connect` is a new DuckDB connection with its own ATTACH (DuckDB's
catalog of an attached namespace lives in the connection, which is what several of its bugs
are about, so the tests choose when a statement runs on a fresh one).

Operations: connect(uri, namespace) -> conn; sql(conn, sql) -> {columns, rows};
close(conn)."""

import driver_loop

answers = driver_loop.take_stdout()

import glob  # noqa: E402
import itertools  # noqa: E402
import os  # noqa: E402

import duckdb  # noqa: E402
import duckdb_extension_lance  # noqa: E402

# The wheel ships the signed extension for its DuckDB version; LOAD takes its path.
EXTENSION = glob.glob(os.path.join(os.path.dirname(duckdb_extension_lance.__file__),
                                   "extensions", f"v{duckdb.__version__}", "lance.duckdb_extension"))[0]
connections: dict[int, duckdb.DuckDBPyConnection] = {}
handles = itertools.count(1)
verified = False


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(uri: str, namespace: str) -> int:
    """A new connection with the namespace (its id joined by `$`; `$` for the root)
    attached as `lg`: its tables are `lg.main.<name>`."""
    global verified
    # LOAD checks the extension's signature by hashing its 254 MB: 2-3 s on these cores, for
    # every new database. The first connection of the process loads it as a user does
    # (signature checked); later ones load the same checked file without hashing it again.
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"} if verified else {})
    con.execute(f"LOAD {quote(EXTENSION)}")
    verified = True
    con.execute(f"ATTACH {quote(namespace)} AS lg (TYPE LANCE, ENDPOINT {quote(uri)})")
    handle = next(handles)
    connections[handle] = con
    return handle


def plain(value):
    """DuckDB's Python values as JSON: lists for arrays and tuples, floats as floats."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def sql(conn: int, sql: str) -> dict:
    cursor = connections[conn].execute(sql)
    columns = [d[0] for d in cursor.description] if cursor.description else []
    rows = cursor.fetchall() if cursor.description else []
    return {"columns": columns, "rows": [plain(list(r)) for r in rows]}


def close(conn: int) -> None:
    connections.pop(conn).close()


driver_loop.serve(answers, {"connect": connect, "sql": sql, "close": close})
