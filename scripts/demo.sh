#!/usr/bin/env bash
# The main job on a fresh machine: build, start devcluster (a local Kubernetes), install the CRDs,
# start the function-controller, deploy examples/hello.py with the kubeless CLI, and call it.
#
#   scripts/demo.sh            run it once and stop everything
#   scripts/demo.sh --keep     leave devcluster and the controller running (prints how to use them)
#
# Env: KUBELESS_SKIP_BUILD=1 uses the binaries already in $CARGO_TARGET_DIR/debug.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

keep=false
[ "${1:-}" = "--keep" ] && keep=true

if [ "${KUBELESS_SKIP_BUILD:-0}" != 1 ]; then
  claim_target_dir
  log "building the binaries (first time: several minutes)"
  cargo build --locked --bins -p devcluster -p kubeless-runtime -p function-controller -p kubeless-cli
fi
bin="$CARGO_TARGET_DIR/debug"
state="$(mktemp -d "${TMPDIR:-/tmp}/kubeless-demo.XXXXXX")"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$state"
}
if ! $keep; then trap cleanup EXIT; fi

log "starting devcluster"
"$bin/devcluster" up --state-dir "$state" --kubeconfig "$state/kubeconfig" >"$state/devcluster.out" 2>"$state/devcluster.log" &
pids+=($!)
for _ in $(seq 1 100); do
  [ -s "$state/devcluster.out" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$state/devcluster.log" >&2; exit 1; }
  sleep 0.1
done
[ -s "$state/devcluster.out" ] || { echo "devcluster did not start in 10 s" >&2; cat "$state/devcluster.log" >&2; exit 1; }
export KUBECONFIG="$state/kubeconfig"

log "installing the CRDs, the kubeless namespace and its kubeless-config ConfigMap"
kubectl apply -f deploy/crds/ >/dev/null
# The namespace and the runtime catalogue (what tools built for Kubeless read), as manifests:
# `kubectl create namespace` sends protobuf, which devcluster does not speak.
kubectl apply -f deploy/kubeless-config.yaml >/dev/null

log "starting the function-controller"
"$bin/function-controller" >"$state/function-controller.log" 2>&1 &
pids+=($!)

log "kubeless function deploy hello"
"$bin/kubeless" function deploy hello --runtime python3.11 --handler hello.handler \
  --from-file examples/hello.py --wait --wait-timeout 180
"$bin/kubeless" function ls

log "kubeless function call hello"
"$bin/kubeless" function call hello --data '{"greeting": "hi"}'
echo

if $keep; then
  cat <<MSG

devcluster and the function-controller keep running (PIDs ${pids[*]}); state in $state.
  export KUBECONFIG=$state/kubeconfig
  $bin/kubeless function ls
  kubectl get pods
Stop them with: kill ${pids[*]}
MSG
fi
