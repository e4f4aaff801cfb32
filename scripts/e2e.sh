#!/usr/bin/env bash
# The end-to-end tests against devcluster or a real Kubernetes control plane: the one switch.
#
#   scripts/e2e.sh devcluster     devcluster's own API server and pod runner
#   scripts/e2e.sh v1.34.4        a real control plane (etcd, kube-apiserver, kube-controller-manager,
#                                 kube-scheduler built by scripts/k8s/build.sh v1.34.4), devcluster's
#                                 runner as its node, all inside scripts/netns.sh
#   scripts/e2e.sh v1.34.4 -- --test nats_function      only some of them (cargo test arguments)
#
# The tests: integration-tests (the chart installed under its RBAC, a function per runtime, every
# trigger's delivery, the gateway, scale to zero and the warm pool, the build step, the fault
# suite, tenant isolation, the README's main job) and the quickstart walk (cli/tests/quickstart.rs).
# The switch is DEVCLUSTER_KUBERNETES: every devcluster the tests start (through
# devcluster::Options::for_tests, or `devcluster up` in scripts) is then the real control plane.
# Needs the binaries of `cargo build --workspace --bins` (scripts/test.sh builds them first).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
[ $# -ge 1 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
cluster="$1"; shift
only=()
if [ "${1:-}" = "--" ]; then shift; only=("$@"); fi
claim_target_dir

run() {
  if [ ${#only[@]} -gt 0 ]; then
    cargo test --locked --no-fail-fast -p integration-tests "${only[@]}"
  else
    cargo test --locked --no-fail-fast -p integration-tests
    cargo test --locked --no-fail-fast -p kubeless-cli --test quickstart
  fi
}

case "$cluster" in
  devcluster)
    unset DEVCLUSTER_KUBERNETES
    run
    ;;
  v*)
    bins="${KUBELESS_K8S_CACHE:-$HOME/.cache/kubeless-rs/k8s}/$cluster/bin"
    [ -f "$bins/.built" ] || { echo "Kubernetes $cluster is not built: run scripts/k8s/build.sh $cluster" >&2; exit 2; }
    export DEVCLUSTER_KUBERNETES="$cluster"
    # `run`, with the arguments, inside the network namespace.
    bash scripts/netns.sh bash -c "set -euo pipefail; $(declare -p only); $(declare -f run); run"
    ;;
  *) echo "unknown cluster $cluster: devcluster or a version such as v1.34.4" >&2; exit 2 ;;
esac
