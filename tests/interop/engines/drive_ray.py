"""Ray's driver for tests/interop/test_ray.py, run with venv-ray's python (ray 2.60.0,
lance-ray 0.5.0). Ray starts once per driver, small (two CPUs, no dashboard), and every call
addresses a table as a Ray user does through a Lance Namespace: `namespace_impl="rest"`,
`namespace_properties={"uri": <gateway>}`, `table_id`. Nothing else is passed: storage
options (and, on S3, keys) are what the gateway vends.

Operations: write(uri, table_id, rows, mode); read(uri, table_id, filter=None) -> rows
(lance-ray's `filter` is pushed into the Lance scan); compact(uri, table_id) -> metrics."""

import driver_loop

answers = driver_loop.take_stdout()

import logging  # noqa: E402

import lance_ray  # noqa: E402
import ray  # noqa: E402

ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
context = ray.data.DataContext.get_current()
context.enable_progress_bars = False
context.print_on_execution_start = False


def where_(uri: str, table_id: list[str]) -> dict:
    return {"namespace_impl": "rest", "namespace_properties": {"uri": uri}, "table_id": table_id}


def write(uri: str, table_id: list[str], rows: list[dict], mode: str) -> None:
    lance_ray.write_lance(ray.data.from_items(rows), mode=mode, **where_(uri, table_id))


def read(uri: str, table_id: list[str], filter: str | None = None) -> list[dict]:
    ds = lance_ray.read_lance(filter=filter, **where_(uri, table_id))
    return ds.take_all()


def compact(uri: str, table_id: list[str]) -> dict | None:
    metrics = lance_ray.compact_files(num_workers=1, **where_(uri, table_id))
    if metrics is None:
        return None
    return {k: getattr(metrics, k) for k in ("fragments_removed", "fragments_added", "files_removed", "files_added")}


driver_loop.serve(answers, {"write": write, "read": read, "compact": compact})
