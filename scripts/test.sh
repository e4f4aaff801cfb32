#!/usr/bin/env bash
# The whole test suite, from a fresh clone on a fresh machine: installs what is missing, checks
# formatting and lints, builds every binary and runs every test. .ci/run calls exactly this.
# Each stage prints how long it took, and a summary of all stages closes the run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

stage_names=()
stage_secs=()
stage() {
  local name="$1"; shift
  log "$name"
  local start=$SECONDS rc=0
  "$@" || rc=$?
  local took=$((SECONDS - start))
  # A failed stage is timed and listed too, then ends the run.
  [ "$rc" -eq 0 ] || name="$name (FAILED, exit $rc)"
  stage_names+=("$name"); stage_secs+=("$took")
  log "$name: ${took} s"
  return "$rc"
}
summary() {
  log "time per stage:"
  for i in "${!stage_names[@]}"; do printf '    %5d s  %s\n' "${stage_secs[$i]}" "${stage_names[$i]}" >&2; done
}
trap summary EXIT

claim_target_dir

stage "install missing tools" ensure_tools
stage "cargo fmt --check" cargo fmt --all -- --check
stage "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings
# Tests start the real binaries (devcluster, the services, the runtime), so build them first.
stage "cargo build --bins" cargo build --workspace --bins --locked
# The real Kubernetes control plane's binaries (kube-control-plane's tests start them), built
# from Go modules into ~/.cache/kubeless-rs/k8s once per version: a second or so when cached,
# 25-30 minutes per version on a new machine. The oldest version the chart claims is always
# built; the newest too once it is cached (or with KUBELESS_K8S_NEWEST=1), so a new machine's
# first run stays within CI's time. The tests run at every version that is built.
k8s_versions=(v1.34.4)
if [ "${KUBELESS_K8S_NEWEST:-0}" = 1 ] || [ -x "${KUBELESS_K8S_CACHE:-$HOME/.cache/kubeless-rs/k8s}/v1.37.2/bin/kube-apiserver" ]; then
  k8s_versions+=(v1.37.2)
fi
stage "real control plane: build" bash scripts/k8s/build.sh "${k8s_versions[@]}"
# The container images (buildah, no Docker daemon): the cold build's times and sizes are printed
# here; integration-tests/tests/images.rs then rebuilds them (cached), checks and pushes them.
stage "images: scripts/images.sh build" bash scripts/images.sh build
# --no-fail-fast: one failing test binary does not hide the results of the others.
stage "cargo test" cargo test --workspace --locked --no-fail-fast
# The same end-to-end tests (integration-tests and the quickstart walk ran above on devcluster)
# on the real control plane at every version built, the versions side by side: each runs about
# half a core, mostly waiting. DEVCLUSTER_KUBERNETES switches every devcluster the tests start to
# etcd, kube-apiserver, kube-controller-manager and kube-scheduler with devcluster's runner as
# the node, inside a network namespace (scripts/e2e.sh, scripts/netns.sh).
stage "end-to-end tests on Kubernetes ${k8s_versions[*]}" bash scripts/e2e.sh "${k8s_versions[@]}"
