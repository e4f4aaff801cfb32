#!/usr/bin/env bash
# The end-to-end tests against devcluster or a real Kubernetes control plane: the one switch.
#
#   scripts/e2e.sh devcluster              devcluster's own API server and pod runner
#   scripts/e2e.sh v1.34.4                 a real control plane (etcd, kube-apiserver,
#                                          kube-controller-manager, kube-scheduler built by
#                                          scripts/k8s/build.sh v1.34.4), devcluster's runner as
#                                          its node, inside scripts/netns.sh
#   scripts/e2e.sh v1.34.4 v1.37.2         both, side by side (each in its own network namespace)
#   scripts/e2e.sh --only cron,demo v1.34.4    some of the tests
#
# The tests: every integration-tests target but images and helm_chart (those build images and
# render the chart, with no cluster in between): the chart installed under its RBAC, a function
# per runtime, every trigger's delivery, the gateway, scale to zero and the warm pool, the build
# step, the fault suite, tenant isolation, the README's main job; and the quickstart walk
# (kubeless-cli's quickstart). The switch is DEVCLUSTER_KUBERNETES: every devcluster the tests
# start (devcluster::Options::for_tests, or `devcluster up` in scripts) is then the real control
# plane. Each test binary's result and time is printed as it ends, a failed one's output after
# all have run. Needs the binaries of `cargo build --workspace --bins` (scripts/test.sh builds them).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
EXCLUDED=" images helm_chart "

# Internal: runs the tests of LIST (lines NAME<TAB>EXE<TAB>DIR) against CLUSTER; logs in LOGDIR.
if [ "${1:-}" = "--inside" ]; then
  cluster="$2"; list="$3"; logdir="$4"; failed=0
  while IFS=$'\t' read -r name exe dir; do
    start=$SECONDS; rc=0
    (cd "$dir" && CARGO_MANIFEST_DIR="$dir" "$exe" >"$logdir/$cluster.$name.log" 2>&1) || rc=$?
    took=$((SECONDS - start))
    summary="$(grep -E '^test result:' "$logdir/$cluster.$name.log" | tail -1 | sed 's/; finished in.*//')"
    if [ "$rc" -eq 0 ]; then
      printf '[%s] %-24s ok    %4d s  %s\n' "$cluster" "$name" "$took" "$summary"
    else
      printf '[%s] %-24s FAIL  %4d s  %s\n' "$cluster" "$name" "$took" "${summary:-exit $rc}"
      echo "$name" >>"$logdir/$cluster.failed"; failed=1
    fi
  done <"$list"
  # What the tests' control planes took to start (their "Kubernetes V started: ..." lines).
  if [ "$cluster" != devcluster ]; then
    cat "$logdir/$cluster".*.log | sed -n 's/.*Kubernetes .* started: .*all ready \([0-9.]*\) s.*/\1/p' |
      sort -n | awk -v c="$cluster" 'NR==1{min=$1} {max=$1; n++; sum+=$1}
        END { if (n) printf "[%s] %d control planes started, all ready in %.1f-%.1f s (mean %.1f s)\n", c, n, min, max, sum/n }'
  fi
  exit "$failed"
fi

only=""
if [ "${1:-}" = "--only" ]; then only=",$2,"; shift 2; fi
[ $# -ge 1 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
for cluster in "$@"; do
  case "$cluster" in
    devcluster) ;;
    v*) [ -f "${KUBELESS_K8S_CACHE:-$HOME/.cache/kubeless-rs/k8s}/$cluster/bin/.built" ] ||
          { echo "Kubernetes $cluster is not built: run scripts/k8s/build.sh $cluster" >&2; exit 2; } ;;
    *) echo "unknown cluster $cluster: devcluster or a version such as v1.34.4" >&2; exit 2 ;;
  esac
done
claim_target_dir

logdir="$(mktemp -d "${TMPDIR:-/tmp}/kubeless-e2e.XXXXXX")"
list="$logdir/tests"
# The test binaries, built once (the cluster is chosen at run time).
cargo test --locked --no-run --message-format=json -p integration-tests -p kubeless-cli 2>/dev/null |
  python3 -c '
import json, os, sys
excluded, only = sys.argv[1].split(), sys.argv[2]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if t["kind"] != ["test"] or t["name"] in excluded:
        continue
    if "/cli/" in t["src_path"] and t["name"] != "quickstart":
        continue
    if only and "," + t["name"] + "," not in only:
        continue
    print(t["name"], m["executable"], os.path.dirname(m["manifest_path"]), sep="\t")
' "$EXCLUDED" "$only" | sort >"$list"
[ -s "$list" ] || { echo "no test selected" >&2; exit 2; }
log "end-to-end tests ($(wc -l <"$list") binaries) on: $*; logs in $logdir"

pids=()
for cluster in "$@"; do
  if [ "$cluster" = devcluster ]; then
    env -u DEVCLUSTER_KUBERNETES bash "$0" --inside "$cluster" "$list" "$logdir" &
  else
    DEVCLUSTER_KUBERNETES="$cluster" bash scripts/netns.sh bash "$0" --inside "$cluster" "$list" "$logdir" &
  fi
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
for f in "$logdir"/*.failed; do
  [ -e "$f" ] || continue
  cluster="$(basename "$f" .failed)"
  while read -r name; do
    echo "===== $name on $cluster: end of its output" >&2
    tail -n 150 "$logdir/$cluster.$name.log" >&2
  done <"$f"
done
exit "$rc"
