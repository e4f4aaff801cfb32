#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs what is missing, checks
# formatting and lints, builds every binary and runs every test. .ci/run calls exactly this.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

ensure_tools

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

# Tests start the real binaries (devcluster, the services, the runtime), so build them first.
log "cargo build --bins"
cargo build --workspace --bins --locked

# The container images (buildah, no Docker daemon): the cold build's times and sizes are printed
# here; integration-tests/tests/images.rs then rebuilds them (cached), checks and pushes them.
log "images: scripts/images.sh build"
bash scripts/images.sh build

log "cargo test"
cargo test --workspace --locked
