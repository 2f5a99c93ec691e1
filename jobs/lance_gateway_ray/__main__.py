"""`python -m lance_gateway_ray <task>`: runs one task of a job the gateway submitted and
prints its result. Exits 0 when the work committed or there was nothing to do, 3 when the
gateway no longer wanted it committed, 1 on any failure (the traceback is in the job's log)."""

import sys

import ray

from . import cleanup, compact, index
from .gateway import Job, Stopped, report, try_reading_elsewhere

TASKS = {
    "compact": compact.run,
    "index": index.build,
    "index_upkeep": index.upkeep,
    "cleanup": cleanup.run,
}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in TASKS:
        print(f"usage: python -m lance_gateway_ray {{{','.join(TASKS)}}}", file=sys.stderr)
        return 2
    job = Job.from_environment()
    ray.init(log_to_driver=True)
    try_reading_elsewhere(job)
    try:
        report(TASKS[argv[1]](job))
    except Stopped as stopped:
        print(stopped, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
