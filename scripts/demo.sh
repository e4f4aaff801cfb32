#!/usr/bin/env bash
# The main job on a fresh machine: build, start devcluster (a local Kubernetes), install the CRDs,
# start the function-controller, deploy examples/hello.py with the kubeless CLI, and call it.
#
#   scripts/demo.sh            run it once and stop everything
#   scripts/demo.sh --keep     leave devcluster and the controller running (prints how to use them)
#   scripts/demo.sh --images   the same as a user installs it on a cluster: the images built with
#                              buildah and pushed to a loopback registry, the Helm chart applied to
#                              devcluster in container mode (podman), the function called through
#                              the chart's HTTP gateway. The steps of docs/helm.md, "Try it on your
#                              machine". Needs root and podman (`ensure_containers` in lib.sh).
#
# Env: KUBELESS_SKIP_BUILD=1 uses the binaries already in $CARGO_TARGET_DIR/debug (and, with
# --images, those of a former `scripts/images.sh build` in $CARGO_TARGET_DIR/image).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

keep=false
images=false
for arg in "$@"; do
  case "$arg" in
    --keep) keep=true ;;
    --images) images=true ;;
    *) sed -n '2,13p' "$0" >&2; exit 2 ;;
  esac
done

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
  if $images; then bash scripts/images.sh registry-stop "$state/registry"; fi
  rm -rf "$state"
}
if ! $keep; then trap cleanup EXIT; fi

pods=process
if $images; then
  pods=container
  # The default install's services and the Python runtime (cached after the first build).
  log "building the images (buildah; the first time takes a long while)"
  # KUBELESS_SKIP_BUILD=1 uses the image binaries built before, too.
  if [ "${KUBELESS_SKIP_BUILD:-0}" = 1 ]; then export KUBELESS_IMAGE_SKIP_CARGO=1; fi
  bash scripts/images.sh build function-controller http-trigger-controller cronjob-trigger-controller runtime-python
  REGISTRY="$(bash scripts/images.sh registry-start "$state/registry")"
  log "pushing them to the registry at $REGISTRY"
  bash scripts/images.sh push "$REGISTRY" function-controller http-trigger-controller cronjob-trigger-controller runtime-python
fi

log "starting devcluster (pods: $pods)"
"$bin/devcluster" up --pods "$pods" --state-dir "$state" --kubeconfig "$state/kubeconfig" >"$state/devcluster.out" 2>"$state/devcluster.log" &
pids+=($!)
# devcluster is up in well under a second; a real control plane (DEVCLUSTER_KUBERNETES, see
# docs/devcluster.md) takes 8-15 s, more on a loaded machine.
for _ in $(seq 1 1200); do
  [ -s "$state/devcluster.out" ] && break
  kill -0 "${pids[0]}" 2>/dev/null || { cat "$state/devcluster.log" >&2; exit 1; }
  sleep 0.1
done
[ -s "$state/devcluster.out" ] || { echo "devcluster did not start in 120 s" >&2; cat "$state/devcluster.log" >&2; exit 1; }
export KUBECONFIG="$state/kubeconfig"

if $images; then
  log "installing the chart (its CRDs, then the services from the registry's images)"
  kubectl apply -f deploy/helm/kubeless/crds/ >/dev/null
  kubectl create namespace kubeless >/dev/null
  python3 deploy/helm/render.py template kubeless deploy/helm/kubeless -n kubeless \
    --set global.bindPodIP=true --set global.imageRegistry="$REGISTRY" \
    --set http-trigger-controller.gateway.enabled=true | kubectl apply -f - >/dev/null
  kubectl wait --for=condition=available deployment --all -n kubeless --timeout=300s
  kubectl get pods -n kubeless

  log "kubeless function deploy hello, and an HTTP trigger for it"
  "$bin/kubeless" function deploy hello --runtime python3.11 --handler hello.handler \
    --from-file examples/hello.py --wait --wait-timeout 300
  "$bin/kubeless" trigger http create hello --function-name hello --path hello
  "$bin/kubeless" function ls

  log "calling it through the chart's HTTP gateway"
  gateway="$(kubectl get pods -n kubeless -l app.kubernetes.io/name=http-trigger-controller \
    -o jsonpath='{.items[0].status.podIP}')"
  # The gateway routes by the trigger's host name, which the CLI defaults to
  # <function>.<API server host>.nip.io, and learns the route within a moment: retry until then.
  curl -sS --fail --retry 30 --retry-delay 1 --retry-all-errors -H 'Host: hello.127.0.0.1.nip.io' \
    -H 'content-type: application/json' -d '{"greeting": "hi"}' "http://$gateway:8080/hello"
  echo
  if $keep; then
    cat <<MSG

devcluster keeps running the chart's pods with podman (PID ${pids[*]}); state in $state.
  export KUBECONFIG=$state/kubeconfig
  kubectl get pods -A
Stop it with: kill ${pids[*]}; bash scripts/images.sh registry-stop $state/registry
MSG
  fi
  exit 0
fi

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
