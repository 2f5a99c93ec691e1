"""Cleanup on Ray: Lance's removal of old versions and the files only they referenced, in
one Ray task (it is listing and deleting, one table's folder at a time). It commits no
version; the gateway removes its receipts of the removed versions once the job is done."""

from datetime import timedelta

import ray

from .gateway import Job


@ray.remote(num_cpus=1)
def remove_old_versions(job: Job, retention_s: float, keep_versions: int) -> dict:
    stats = job.open().cleanup_old_versions(
        older_than=timedelta(seconds=retention_s),
        retain_versions=max(1, keep_versions),
        error_if_tagged_old_versions=False,
    )
    return {
        "versions_removed": stats.old_versions,
        "bytes_reclaimed": stats.bytes_removed,
        "files_removed": stats.data_files_removed
        + stats.index_files_removed
        + stats.deletion_files_removed
        + stats.transaction_files_removed,
    }


def run(job: Job) -> dict:
    job.may_commit()
    options = job.options
    removed = remove_old_versions.remote(job, options["retention_s"], options["keep_versions"])
    return {"tasks": 1} | ray.get(removed)
