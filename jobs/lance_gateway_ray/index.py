"""Index builds and index upkeep on Ray.

A build (CreateTableIndex, CreateTableScalarIndex) is split by fragment: each Ray task
builds one segment of the index over its share of the table's fragments with Lance's
distributed build (`create_index_uncommitted`), and the job commits all the segments once,
as one logical index (`commit_existing_index_segments`), after the gateway has said it may.
A full-text index's segments score as one index does (BM25 over the whole table). A vector
index's segments share one model: a Ray task trains the IVF centroids (and the PQ codebook)
on the whole table first, and every segment is built with them, so a search probes the
same partitions in each.

Upkeep (the policy's index upkeep) runs Lance's `optimize_indices` in one Ray task: it
builds and commits in one call, so the gateway's go-ahead is read before it starts."""

import ray
from lance.indices import IndicesBuilder

from .gateway import Job

@ray.remote(num_cpus=1)
def train(job: Job, version: int, spec: dict, rows: int) -> dict:
    """The model every segment of a vector index shares, trained on the whole table as a
    build in one go trains it: the parameters the segments are built with."""
    params = dict(spec.get("params", {}))
    partitions = params.pop("num_partitions", None)
    size = params.pop("target_partition_size", None)
    if partitions is None and size:
        partitions = max(1, -(-rows // size))
    # Without either, pylance's own default (about the square root of the rows).
    builder = IndicesBuilder(job.open(version=version), spec["column"])
    sampling = {k: params[k] for k in ("sample_rate", "max_iters") if k in params}
    ivf = builder.train_ivf(partitions, distance_type=params.get("metric", "l2"), **sampling)
    params |= {"num_partitions": ivf.num_partitions, "ivf_centroids": ivf.centroids}
    if "PQ" in spec["index_type"]:
        pq = builder.train_pq(ivf, params.pop("num_sub_vectors", None), num_bits=params.get("num_bits", 8), **sampling)
        params |= {"num_sub_vectors": pq.num_subvectors, "pq_codebook": pq.codebook}
    return params


@ray.remote(num_cpus=1)
def build_segment(job: Job, version: int, spec: dict, params: dict, fragment_ids: list):
    dataset = job.open(version=version)
    return dataset.create_index_uncommitted(
        spec["column"],
        spec["index_type"],
        name=spec["name"],
        replace=True,
        fragment_ids=fragment_ids,
        **params,
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
    cpus = int(ray.cluster_resources().get("CPU", 1))
    runs = shares(fragments, max(1, min(cpus, len(fragments))))
    params = spec.get("params", {})
    if spec["index_type"].startswith("IVF"):
        params = ray.get(train.remote(job, before, spec, sum(rows for _, rows in fragments)))
    segments = ray.get([build_segment.remote(job, before, spec, params, run) for run in runs])
    job.may_commit()
    try:
        dataset.commit_existing_index_segments(spec["name"], spec["column"], segments)
    except Exception as e:  # noqa: BLE001 (only a commit whose outcome is unknown is retried)
        if "is unknown" not in str(e):
            raise
        # The commit's answer was lost (the gateway it went through went away, and the
        # address leads to another now): the table says whether it was made; if not, it is
        # committed again through the gateway there now.
        print(f"the commit's outcome was lost ({e}); looking at the table", flush=True)
        if not has_segments(job.open(), segments):
            job.may_commit()
            job.open().commit_existing_index_segments(spec["name"], spec["column"], segments)
    return {
        "version_before": before,
        "tasks": len(runs),
        "segments": len(segments),
        "version": job.open().version,
    }


def has_segments(dataset, segments) -> bool:
    """Whether `dataset` holds an index made of `segments`."""
    made = {str(s.uuid) for s in segments}
    return any(str(s.uuid) in made for i in dataset.describe_indices() for s in i.segments)


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
