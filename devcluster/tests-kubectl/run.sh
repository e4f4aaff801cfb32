#!/usr/bin/env bash
# Drives stock kubectl against devcluster-apiserver: get, apply, delete, scale,
# logs, CRDs with printer columns, get -w, and the create subcommands, create token and
# auth can-i (protobuf bodies). Exits non-zero on the first failure.
# Usage: DEVCLUSTER_APISERVER_BIN=/path/to/devcluster-apiserver bash run.sh
set -euo pipefail

BIN="${DEVCLUSTER_APISERVER_BIN:?set DEVCLUSTER_APISERVER_BIN to the devcluster-apiserver binary}"
if ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl is missing: apt-get install -y kubernetes-client" >&2
  exit 2
fi

WORK="$(mktemp -d)"
SERVER_PID=""
WATCH_PID=""
cleanup() {
  [ -n "$WATCH_PID" ] && kill "$WATCH_PID" 2>/dev/null || true
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN" --kubeconfig "$WORK/kubeconfig" --logs-dir "$WORK/logs" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 100); do
  [ -s "$WORK/kubeconfig" ] && break
  sleep 0.1
done
[ -s "$WORK/kubeconfig" ] || { echo "server did not start:"; cat "$WORK/server.log"; exit 1; }
export KUBECONFIG="$WORK/kubeconfig"

k() { kubectl --cache-dir "$WORK/cache" --request-timeout=20s "$@"; }
PASSED=0
ok() { PASSED=$((PASSED + 1)); echo "ok - $1"; }
fail() { echo "FAIL - $1"; echo "--- server log"; tail -n 50 "$WORK/server.log"; exit 1; }
expect_contains() { # name, haystack, needle
  if grep -qF -- "$3" <<<"$2"; then ok "$1"; else fail "$1: expected '$3' in: $2"; fi
}
expect_eq() { # name, actual, expected
  if [ "$2" = "$3" ]; then ok "$1"; else fail "$1: expected '$3', got '$2'"; fi
}

cat >"$WORK/app.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  a: "1"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - port: 80
YAML

cat >"$WORK/crd.yaml" <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.devcluster.io
spec:
  group: example.devcluster.io
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, shortNames: [gd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Color, type: string, jsonPath: .spec.color}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [color]
            properties:
              color: {type: string}
YAML

out="$(k get namespaces)"
expect_contains "get namespaces lists default" "$out" "default"
expect_contains "get namespaces has table columns" "$out" "STATUS"

out="$(k apply -f "$WORK/app.yaml")"
expect_contains "apply creates the configmap" "$out" "configmap/settings created"
expect_contains "apply creates the deployment" "$out" "deployment.apps/web created"
out="$(k apply -f "$WORK/app.yaml")"
expect_contains "re-apply is unchanged" "$out" "configmap/settings unchanged"
sed -i 's/a: "1"/a: "2"/' "$WORK/app.yaml"
out="$(k apply -f "$WORK/app.yaml")"
expect_contains "apply with a change configures" "$out" "configmap/settings configured"
expect_eq "applied value is stored" "$(k get configmap settings -o jsonpath='{.data.a}')" "2"

out="$(k get deployments)"
expect_contains "deployment table header" "$out" "UP-TO-DATE"
expect_contains "deployment table row" "$out" "web"
k scale deployment web --replicas=3 >/dev/null
expect_eq "scale through /scale" "$(k get deployment web -o jsonpath='{.spec.replicas}')" "3"
out="$(k get all)"
expect_contains "get all includes services" "$out" "service/web"

out="$(k apply -f "$WORK/crd.yaml")"
expect_contains "apply creates the CRD" "$out" "created"
k wait --for condition=established --timeout=20s crd/gadgets.example.devcluster.io >/dev/null
cat <<'YAML' | k apply -f - >/dev/null
apiVersion: example.devcluster.io/v1
kind: Gadget
metadata:
  name: g1
spec:
  color: green
YAML
out="$(k get gadgets)"
expect_contains "CRD printer column header" "$out" "COLOR"
expect_contains "CRD printer column value" "$out" "green"
expect_contains "CRD short name" "$(k get gd g1 -o name)" "gadget.example.devcluster.io/g1"
if out="$(echo '{"apiVersion":"example.devcluster.io/v1","kind":"Gadget","metadata":{"name":"bad"},"spec":{}}' | k create -f - 2>&1)"; then
  fail "invalid custom resource was accepted: $out"
fi
expect_contains "schema validation rejects a missing field" "$out" "spec.color: Required value"

# get -w prints objects created after the watch started.
k get configmaps -w >"$WORK/watch.out" 2>&1 &
WATCH_PID=$!
sleep 1
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: watched\n' | k apply -f - >/dev/null
for _ in $(seq 1 50); do
  grep -q watched "$WORK/watch.out" && break
  sleep 0.1
done
expect_contains "get -w sees a new object" "$(cat "$WORK/watch.out")" "watched"
kill "$WATCH_PID" 2>/dev/null || true
WATCH_PID=""

# Pod logs come from the files the runner writes.
cat <<'YAML' | k apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata:
  name: logger
spec:
  containers:
  - name: main
    image: busybox
YAML
mkdir -p "$WORK/logs/default/logger"
printf 'line one\nline two\n' >"$WORK/logs/default/logger/main.log"
expect_eq "kubectl logs" "$(k logs logger)" "$(printf 'line one\nline two')"
expect_eq "kubectl logs --tail" "$(k logs logger --tail=1)" "line two"
if out="$(k logs logger -c nope 2>&1)"; then fail "wrong container accepted"; fi
expect_contains "wrong container is a 400" "$out" "not valid for pod"

out="$(k delete -f "$WORK/app.yaml")"
expect_contains "delete -f" "$out" "deployment.apps \"web\" deleted"
if out="$(k get configmap settings 2>&1)"; then fail "deleted configmap still there"; fi
expect_contains "deleted object is NotFound" "$out" "NotFound"

printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: scratch\n' | k apply -f - >/dev/null
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: inside\n' | k -n scratch apply -f - >/dev/null
k delete namespace scratch >/dev/null
if out="$(k get namespace scratch 2>&1)"; then fail "namespace still there after delete: $out"; fi
ok "namespace deletion completes"

# kubectl create <kind> sends protobuf bodies for built-in kinds.
expect_contains "create secret generic" "$(k create secret generic s1 --from-literal=user=admin --from-literal=pass=s3cret)" "secret/s1 created"
expect_eq "secret data reads back" "$(k get secret s1 -o jsonpath='{.data.pass}' | base64 -d)" "s3cret"
expect_eq "secret type" "$(k get secret s1 -o jsonpath='{.type}')" "Opaque"
expect_contains "create configmap --from-literal" "$(k create configmap c1 --from-literal=a=1 --from-literal=b=two)" "configmap/c1 created"
expect_eq "configmap data reads back" "$(k get configmap c1 -o jsonpath='{.data.a},{.data.b}')" "1,two"
expect_contains "create namespace" "$(k create namespace made-by-create)" "namespace/made-by-create created"
expect_eq "namespace is active" "$(k get namespace made-by-create -o jsonpath='{.status.phase}')" "Active"
expect_contains "create serviceaccount" "$(k -n made-by-create create serviceaccount robot)" "serviceaccount/robot created"
expect_eq "serviceaccount reads back" "$(k -n made-by-create get serviceaccount robot -o name)" "serviceaccount/robot"
expect_contains "create role" "$(k create role reader --verb=get,list --resource=configmaps)" "role.rbac.authorization.k8s.io/reader created"
expect_eq "role rules read back" "$(k get role reader -o jsonpath='{.rules[0].verbs}')" '["get","list"]'
expect_contains "create rolebinding" "$(k create rolebinding reader --role=reader --serviceaccount=made-by-create:robot)" "rolebinding.rbac.authorization.k8s.io/reader created"
expect_eq "rolebinding subject reads back" "$(k get rolebinding reader -o jsonpath='{.subjects[0].name}')" "robot"
expect_contains "create service clusterip" "$(k create service clusterip made --tcp=80:8080)" "service/made created"
expect_eq "service ports read back" "$(k get service made -o jsonpath='{.spec.ports[0].port}/{.spec.ports[0].targetPort}/{.spec.type}')" "80/8080/ClusterIP"
# kubectl create token and kubectl auth can-i send protobuf too.
k create serviceaccount reader >/dev/null
k create rolebinding reader-sa --role=reader --serviceaccount=default:reader >/dev/null
TOKEN="$(k create token reader --duration=1h)"
[ -n "$TOKEN" ] && ok "create token" || fail "create token printed nothing"
expect_eq "auth can-i allowed" "$(k --token="$TOKEN" auth can-i list configmaps)" "yes"
if out="$(k --token="$TOKEN" auth can-i delete configmaps 2>&1)"; then fail "can-i delete said yes: $out"; fi
expect_eq "auth can-i denied" "$out" "no"
if out="$(k create secret generic s1 --from-literal=x=y 2>&1)"; then fail "duplicate secret accepted: $out"; fi
expect_contains "create of an existing secret is AlreadyExists" "$out" "already exists"

echo "kubectl script: $PASSED passed, 0 failed"
