# SeaweedFS at the version the test suites pin (tools/seaweedfs/go.mod, SEAWEEDFS_VERSION in
# scripts/env.sh), so compose runs what the suites test.
#
#   podman build --format docker -f docker/seaweedfs.Dockerfile -t IMAGE .
#       builds weed from the Go module proxy through tools/seaweedfs
#   podman build --format docker -f docker/seaweedfs.Dockerfile --target prebuilt -t IMAGE CTX
#       packs an already built `weed` found in CTX (scripts/images)
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY tools/seaweedfs ./
RUN go build -o /weed github.com/seaweedfs/seaweedfs/weed

FROM debian:bookworm-slim AS base
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
EXPOSE 8333
ENTRYPOINT ["weed"]

FROM base AS prebuilt
COPY --chmod=0755 weed /usr/bin/weed

FROM base AS runtime
COPY --from=build /weed /usr/bin/weed
