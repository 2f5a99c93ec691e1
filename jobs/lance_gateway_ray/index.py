"""Index builds and index upkeep on Ray.

A build (CreateTableIndex, CreateTableScalarIndex) is split by fragment: each Ray task
builds one segment of the index over its share of the table's fragments with Lance's
distributed build (`create_index_uncommitted`), and the job commits all the segments once,
as one logical index (`commit_existing_index_segments`), after the gateway has said it may.
Scalar indices (BTREE, BITMAP, LABEL_LIST, FTS) are built this way across the cluster; a
full-text index's segments score as one index does (BM25 over the whole table). A vector
index is built in one Ray task, as one segment, so that its IVF (and PQ) model is trained
on the whole table as the gateway's own build trains it.

Upkeep (the policy's index upkeep) runs Lance's `optimize_indices` in one Ray task: it
builds and commits in one call, so the gateway's go-ahead is read before it starts."""

import ray

from .gateway import Job

# The index types a segment per share of fragments is built for.
BY_FRAGMENT = {"BTREE", "BITMAP", "LABEL_LIST", "INVERTED"}


@ray.remote(num_cpus=1)
def build_segment(job: Job, version: int, spec: dict, fragment_ids: list):
    dataset = job.open(version=version)
    return dataset.create_index_uncommitted(
        spec["column"],
        spec["index_type"],
        name=spec["name"],
        replace=True,
        fragment_ids=fragment_ids,
        **spec.get("params", {}),
    )


def shares(fragments, n: int) -> list:
    """The fragments, `(id, rows)` in table order, in at most `n` runs of about equal
    rows (each fragment goes to the run its first row falls in; none empty)."""
    total = sum(rows for _, rows in fragments) or 1
    runs = [[] for _ in range(n)]
    seen = 0
    for fragment, rows in fragments:
        runs[min(n - 1, seen * n // total)].append(fragment)
        seen += rows
    return [run for run in runs if run]


def build(job: Job) -> dict:
    spec = job.options
    dataset = job.open()
    before = dataset.version
    fragments = [(f.fragment_id, f.count_rows()) for f in dataset.get_fragments()]
    if spec["index_type"] in BY_FRAGMENT:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        runs = shares(fragments, max(1, min(cpus, len(fragments))))
    else:
        runs = [[f for f, _ in fragments]]
    segments = ray.get([build_segment.remote(job, before, spec, run) for run in runs])
    job.may_commit()
    dataset.commit_existing_index_segments(spec["name"], spec["column"], segments)
    return {
        "version_before": before,
        "tasks": len(runs),
        "segments": len(segments),
        "version": job.open().version,
    }


@ray.remote(num_cpus=1)
def optimize_indices(job: Job, names: list):
    dataset = job.open()
    dataset.optimize.optimize_indices(index_names=names, num_indices_to_merge=1)
    return dataset.version


def upkeep(job: Job) -> dict:
    before = job.open().version
    job.may_commit()
    after = ray.get(optimize_indices.remote(job, job.options["indices"]))
    return {"version_before": before, "tasks": 1, "version": after}
