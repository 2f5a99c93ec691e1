"""Compaction on Ray, in Lance's three steps: the plan here, each rewrite task in a Ray task
of its own (as many at once as the cluster has CPUs for), then one commit of all of them
here, after the gateway has said the job may still commit. A task whose worker is lost is
run again elsewhere by Ray (its default of three retries on a node's failure); nothing is
committed until every task has its result."""

import os
import time

import ray
from lance.optimize import Compaction

from .gateway import Job


@ray.remote(num_cpus=1)
def rewrite(job: Job, version: int, task):
    # A pause before the work, for the tests that stop a worker while it rewrites.
    pause = int(os.environ.get("LANCE_GATEWAY_FAULT_PAUSE_IN_REWRITE_MS") or 0)
    if pause:
        time.sleep(pause / 1000)
    # Each worker opens the table through the gateway itself, at the planned version.
    return task.execute(job.open(version=version))


def run(job: Job) -> dict:
    dataset = job.open()
    before = dataset.version
    plan = Compaction.plan(dataset, job.options)
    result = {"version_before": before, "tasks": plan.num_tasks()}
    if plan.num_tasks() == 0:
        return result | {"fragments_removed": 0, "fragments_added": 0, "version": before}
    rewrites = ray.get([rewrite.remote(job, plan.read_version, task) for task in plan.tasks])
    job.may_commit()
    metrics = Compaction.commit(dataset, rewrites, job.options)
    return result | {
        "fragments_removed": metrics.fragments_removed,
        "fragments_added": metrics.fragments_added,
        "version": job.open().version,
    }
