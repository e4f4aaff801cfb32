#!/usr/bin/env bash
# Drives stock kubectl against devcluster-apiserver: get, apply (client- and server-side, with
# conflicts and managed fields), delete, scale, logs, CRDs with printer columns, explain (OpenAPI
# v3 and v2), get -w, and the create subcommands (deployment, job and cronjob too), create token
# and auth can-i (protobuf bodies).
# Exits non-zero on the first failure.
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
# kubectl explain reads the OpenAPI v3 documents: CRD schemas and built-in types alike.
out="$(k explain gadgets.spec)"
expect_contains "explain a CRD field" "$out" "color	<string> -required-"
out="$(k explain deployment.spec.replicas)"
expect_contains "explain a built-in field's type" "$out" "FIELD: replicas <integer>"
expect_contains "explain a built-in field's description" "$out" "Number of desired pods"
# ... and the OpenAPI v2 document (protobuf), with the type of every field.
out="$(k explain gadgets.spec --output plaintext-openapiv2)"
expect_contains "explain v2: a CRD field" "$out" "color	<string> -required-"
out="$(k explain deployment.spec.replicas --output plaintext-openapiv2)"
expect_contains "explain v2: a built-in field's type" "$out" "FIELD:    replicas <integer>"
k apply --server-side -f "$(dirname "$0")/../../deploy/crds/functions.kubeless.io.yaml" >/dev/null
k wait --for condition=established --timeout=20s crd/functions.kubeless.io >/dev/null
out="$(k explain functions.spec --output plaintext-openapiv2)"
expect_contains "explain v2: Function fields are typed" "$out" "runtime	<string>"
expect_contains "explain v2: nested objects are typed" "$out" "deployment	<Object>"
if grep -q "<>" <<<"$out"; then fail "explain v2 shows a field without a type: $out"; fi
ok "explain v2: no untyped field"
if out="$(echo '{"apiVersion":"example.devcluster.io/v1","kind":"Gadget","metadata":{"name":"bad"},"spec":{}}' | k create -f - 2>&1)"; then
  fail "invalid custom resource was accepted: $out"
fi
expect_contains "schema validation rejects a missing field" "$out" "spec.color: Required value"

# Server-side apply: managed fields, a conflict with another manager, --force-conflicts.
cat >"$WORK/ssa.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: ssa
data:
  a: "1"
  b: "1"
YAML
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: "2"\n' >"$WORK/ssa-other.yaml"
expect_contains "apply --server-side" "$(k apply --server-side -f "$WORK/ssa.yaml")" "configmap/ssa serverside-applied"
if out="$(k apply --server-side --field-manager other -f "$WORK/ssa-other.yaml" 2>&1)"; then fail "conflicting apply succeeded: $out"; fi
expect_contains "a value another manager owns is a conflict" "$out" 'Apply failed with 1 conflict: conflict with "kubectl": .data.a'
expect_eq "the refused apply changed nothing" "$(k get configmap ssa -o jsonpath='{.data.a}')" "1"
expect_contains "--force-conflicts takes it" "$(k apply --server-side --field-manager other --force-conflicts -f "$WORK/ssa-other.yaml")" "configmap/ssa serverside-applied"
expect_eq "the forced value is stored" "$(k get configmap ssa -o jsonpath='{.data.a}')" "2"
out="$(k get configmap ssa -o yaml --show-managed-fields)"
expect_contains "managedFields lists kubectl" "$out" "manager: kubectl"
expect_contains "managedFields lists other" "$out" "manager: other"
expect_contains "managedFields are FieldsV1" "$out" "f:data:"
expect_eq "kubectl keeps b only" "$(k get configmap ssa -o jsonpath='{.metadata.managedFields[?(@.manager=="kubectl")].fieldsV1}' --show-managed-fields)" '{"f:data":{"f:b":{}}}'
if k get configmap ssa -o yaml | grep -q managedFields; then fail "managedFields shown without --show-managed-fields"; fi
ok "kubectl hides managedFields by default"
# Dropping a key from the file removes it from the object.
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata: {}\n' | k apply --server-side -f - >/dev/null
expect_eq "a key no longer applied is removed" "$(k get configmap ssa -o jsonpath='{.data}')" '{"a":"2"}'
# Client-side apply, then server-side apply of a changed file: no conflict.
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: upgraded\ndata:\n  a: "1"\n' | k apply -f - >/dev/null
out="$(printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: upgraded\ndata:\n  a: "5"\n' | k apply --server-side -f - 2>&1)" || fail "server-side apply after client-side apply: $out"
expect_contains "client-side then server-side apply" "$out" "configmap/upgraded serverside-applied"
expect_eq "the server-side value is stored" "$(k get configmap upgraded -o jsonpath='{.data.a}')" "5"

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
# The kinds holding a pod template go as protobuf too, and store what the same object sent
# as JSON (kubectl create -f sends JSON) stores.
expect_contains "create deployment" "$(k create deployment pbweb --image=busybox --replicas=2 --port=8080 -- sleep 3600)" "deployment.apps/pbweb created"
k create deployment jsonweb --image=busybox --replicas=2 --port=8080 --dry-run=client -o json -- sleep 3600 \
  | sed 's/jsonweb/pbweb/g; s/"name": "pbweb",/"name": "jsonweb",/' | k create -f - >/dev/null
expect_eq "deployment from protobuf equals its JSON twin" \
  "$(k get deployment pbweb -o jsonpath='{.spec}')" "$(k get deployment jsonweb -o jsonpath='{.spec}')"
expect_eq "deployment fields read back" \
  "$(k get deployment pbweb -o jsonpath='{.spec.replicas}/{.spec.template.spec.containers[0].ports[0].containerPort}/{.spec.template.spec.containers[0].command}')" \
  '2/8080/["sleep","3600"]'
expect_contains "create cronjob" "$(k create cronjob pbtick --image=busybox --schedule='*/5 * * * *' -- echo hi)" "cronjob.batch/pbtick created"
expect_eq "cronjob fields read back" \
  "$(k get cronjob pbtick -o jsonpath='{.spec.schedule}/{.spec.jobTemplate.spec.template.spec.restartPolicy}')" "*/5 * * * */OnFailure"
expect_contains "create job" "$(k create job pbonce --image=busybox -- echo hi)" "job.batch/pbonce created"
expect_contains "create job --from=cronjob" "$(k create job pbfromcron --from=cronjob/pbtick)" "job.batch/pbfromcron created"
expect_eq "job from cronjob has its template" \
  "$(k get job pbfromcron -o jsonpath='{.spec.template.spec.containers[0].command}/{.metadata.ownerReferences[0].kind}')" '["echo","hi"]/CronJob'
if out="$(k create deployment bad_name --image=busybox 2>&1)"; then fail "invalid deployment name accepted: $out"; fi
expect_contains "a protobuf deployment is validated like JSON" "$out" "Invalid value"
k delete deployment pbweb jsonweb >/dev/null
k delete job pbonce pbfromcron >/dev/null
k delete cronjob pbtick >/dev/null
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

# Unknown fields: kubectl asks for fieldValidation=Strict and gets the real server's 400;
# --validate=warn gets a Warning and the field dropped, --validate=false (Ignore) drops it quietly.
cat >"$WORK/typo.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: typo
  lables: {a: b}
data:
  a: "1"
YAML
if out="$(k apply -f "$WORK/typo.yaml" 2>&1)"; then fail "unknown field accepted under Strict: $out"; fi
expect_contains "strict decoding error for an unknown field" "$out" 'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "metadata.lables"'
out="$(k apply --validate=warn -f "$WORK/typo.yaml" 2>&1)"
expect_contains "unknown field warned about under Warn" "$out" 'Warning: unknown field "metadata.lables"'
expect_contains "and the object is created without it" "$out" "configmap/typo created"
expect_eq "the unknown field is not stored" "$(k get configmap typo -o json | python3 -c 'import json,sys; print("lables" in json.load(sys.stdin)["metadata"])')" "False"
k delete configmap typo >/dev/null
out="$(k apply --validate=false -f "$WORK/typo.yaml" 2>&1)"
expect_eq "Ignore drops it without a word" "$out" "configmap/typo created"

# PodSecurity warn mode and workload warnings; raising enforce warns about existing pods.
k create namespace psa >/dev/null
k label namespace psa pod-security.kubernetes.io/warn=restricted >/dev/null
out="$(k -n psa run loose --image=busybox 2>&1)"
expect_contains "warn mode admits the pod" "$out" "pod/loose created"
expect_contains "warn mode warns" "$out" 'Warning: would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "loose" must set securityContext.allowPrivilegeEscalation=false)'
out="$(k label namespace psa pod-security.kubernetes.io/enforce=baseline pod-security.kubernetes.io/enforce-version=v1.30 2>&1)"
if grep -q "violate" <<<"$out"; then fail "baseline enforce warned about a baseline pod: $out"; fi
ok "raising enforce to a level the pods meet warns nothing"
out="$(k label --overwrite namespace psa pod-security.kubernetes.io/enforce=restricted 2>&1)"
expect_contains "raising enforce warns about existing pods" "$out" 'Warning: existing pods in namespace "psa" violate the new PodSecurity enforce level "restricted:v1.30"'
expect_contains "naming each pod" "$out" 'Warning: loose: allowPrivilegeEscalation != false'
cat >"$WORK/loose-deploy.yaml" <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: loose}
spec:
  selector: {matchLabels: {app: loose}}
  template:
    metadata: {labels: {app: loose}}
    spec:
      containers: [{name: c, image: busybox}]
YAML
out="$(k -n psa apply -f "$WORK/loose-deploy.yaml" 2>&1)"
expect_contains "a Deployment breaking enforce is admitted" "$out" "deployment.apps/loose created"
expect_contains "with the warning the real server gives" "$out" 'Warning: would violate PodSecurity "restricted:v1.30": allowPrivilegeEscalation != false (container "c"'
if out="$(k -n psa run looser --image=busybox 2>&1)"; then fail "enforce admitted a restricted-breaking pod: $out"; fi
expect_contains "enforce refuses the pod itself" "$out" 'violates PodSecurity "restricted:v1.30"'

# Default user-facing ClusterRoles, and escalation checks for a non-admin writer.
expect_eq "admin, edit and view exist" "$(k get clusterrole admin edit view -o name | tr '\n' ' ')" "clusterrole.rbac.authorization.k8s.io/admin clusterrole.rbac.authorization.k8s.io/edit clusterrole.rbac.authorization.k8s.io/view "
k create serviceaccount lead >/dev/null
k create rolebinding lead-admin --clusterrole=admin --serviceaccount=default:lead >/dev/null
LEAD="$(k create token lead --duration=1h)"
expect_eq "admin may read secrets" "$(k --token="$LEAD" auth can-i get secrets)" "yes"
expect_contains "admin may grant edit in its namespace" "$(k --token="$LEAD" create rolebinding dev-edit --clusterrole=edit --serviceaccount=default:reader)" "rolebinding.rbac.authorization.k8s.io/dev-edit created"
if out="$(k --token="$LEAD" create rolebinding grab --clusterrole=cluster-admin --serviceaccount=default:lead 2>&1)"; then fail "admin granted cluster-admin: $out"; fi
expect_contains "granting cluster-admin is an escalation" "$out" 'is attempting to grant RBAC permissions not currently held'

# Events: core/v1 and events.k8s.io/v1 are one resource, as on a real server.
cat >"$WORK/new-event.yaml" <<'YAML'
apiVersion: events.k8s.io/v1
kind: Event
metadata: {name: fn-invalid, namespace: default}
eventTime: "2026-11-28T10:00:00.000000Z"
reportingController: kubeless.io/function-controller
reportingInstance: function-controller-0
action: Reconcile
reason: InvalidSpec
type: Warning
regarding: {apiVersion: kubeless.io/v1beta1, kind: Function, name: hello, namespace: default}
note: "spec.runtime: unknown runtime"
YAML
k create -f "$WORK/new-event.yaml" >/dev/null
out="$(k get events)"
expect_contains "kubectl get events lists an events.k8s.io Event" "$out" "InvalidSpec"
expect_contains "with its note as the message" "$out" "spec.runtime: unknown runtime"
expect_contains "and its regarding object" "$out" "function/hello"
expect_eq "core field selector on involvedObject" "$(k get events --field-selector involvedObject.kind=Function,involvedObject.name=hello -o name)" "event/fn-invalid"
expect_eq "read as core/v1" "$(k get events.v1. fn-invalid -o jsonpath='{.message}/{.reportingComponent}')" "spec.runtime: unknown runtime/kubeless.io/function-controller"
k create -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Event
metadata: {name: pod-backoff, namespace: default}
involvedObject: {kind: Pod, name: web-1, namespace: default}
reason: BackOff
message: Back-off restarting failed container
type: Warning
count: 3
source: {component: kubelet}
YAML
expect_eq "a core Event read as events.k8s.io/v1" "$(k get events.v1.events.k8s.io pod-backoff -o jsonpath='{.note}/{.regarding.name}/{.deprecatedCount}')" "Back-off restarting failed container/web-1/3"
expect_eq "events.k8s.io field selector on regarding" "$(k get events.v1.events.k8s.io --field-selector regarding.kind=Pod -o name)" "event.events.k8s.io/pod-backoff"
k delete events.v1.events.k8s.io fn-invalid >/dev/null
if k get events fn-invalid >/dev/null 2>&1; then fail "an Event deleted through events.k8s.io is still a core Event"; fi
ok "deleted through events.k8s.io, gone from core"

echo "kubectl script: $PASSED passed, 0 failed"
