# Shared settings for the project's scripts. Caches live outside the clone so later runs
# (and CI) build incrementally.
export LANCE_GATEWAY_CACHE="${LANCE_GATEWAY_CACHE:-$HOME/.cache/lance-gateway}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$LANCE_GATEWAY_CACHE/target}"
export LANCE_GATEWAY_VENV="${LANCE_GATEWAY_VENV:-$LANCE_GATEWAY_CACHE/venv}"
export WEED_BIN="${WEED_BIN:-$LANCE_GATEWAY_CACHE/bin/weed}"
export LANCE_GATEWAY_BIN="${LANCE_GATEWAY_BIN:-$CARGO_TARGET_DIR/release/lance-gateway}"
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
# The SeaweedFS version every suite runs against (tools/seaweedfs/go.mod pins it too).
export SEAWEEDFS_VERSION="v0.0.0-20261109003541-7506e5f91cd6"
# The cloud storage emulators (scripts/install-emulators).
export FAKE_GCS_BIN="${FAKE_GCS_BIN:-$LANCE_GATEWAY_CACHE/bin/fake-gcs-server}"
export AZURITE_BIN="${AZURITE_BIN:-$LANCE_GATEWAY_CACHE/azurite/node_modules/.bin/azurite-blob}"
