"""The Ray jobs a lance-gateway submits for work that outgrows it (`src/ray.rs`).

The gateway decides that a table is due, holds its maintenance lease and keeps the job's
transaction record; a job does the heavy part across the cluster's workers and commits once,
through the gateway's REST routes (`gateway.py`), so that under managed versioning its commit
is a CreateTableVersion like any client's. The gateway ships this package itself (it is built
into the binary and uploaded as the job's working directory); the cluster's Python provides
pylance, lance-namespace and Ray at the versions in tests/interop/engines/ray.txt.

Run as `python -m lance_gateway_ray <task>`; what a job is told comes in its environment
(`gateway.Job`), what it did it prints as one line, `LANCE_GATEWAY_RESULT <json>`."""
