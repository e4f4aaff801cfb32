#!/usr/bin/env bash
# Builds a real Kubernetes control plane from Go modules: kube-apiserver, kube-controller-manager,
# kube-scheduler (k8s.io/kubernetes at VERSION) and etcd (go.etcd.io/etcd/server/v3 at the version
# that release's go.mod requires), into ${KUBELESS_K8S_CACHE:-~/.cache/kubeless-rs/k8s}/VERSION/bin/.
#
#   scripts/k8s/build.sh [VERSION ...]     default: the oldest and newest minor the tests use
#
# A version whose binaries and stamp file exist is skipped, so a warm run takes a second.
# The build happens in VERSION/work/ next to bin/: two tiny Go modules, one requiring
# k8s.io/kubernetes (with every k8s.io staging module pinned by `replace`, as the release's own
# go.mod does with local paths), one requiring etcd's server module.
set -euo pipefail

DEFAULT_VERSIONS=(v1.34.4 v1.37.2)
# The machine's Go (Debian's golang package, older, may also be on PATH).
[ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"
CACHE="${KUBELESS_K8S_CACHE:-$HOME/.cache/kubeless-rs/k8s}"
# The Go toolchain the Go module proxy serves for modules whose go.mod needs more than ours.
NEWER_GO=go1.27.3

log() { printf '==> %s\n' "$*" >&2; }
# step NAME CMD...: runs CMD and prints how long it took.
step() {
  local name="$1"; shift
  local start=$SECONDS
  log "$name"
  "$@"
  log "$name: $((SECONDS - start)) s"
}

# go.mod `go` line newer than the go command here? Then use the newer toolchain (this script only).
choose_toolchain() {
  local need have
  need="$(go mod edit -json "$1" | sed -n 's/^\t"Go": "\(.*\)",\{0,1\}$/\1/p')"
  have="$(GOTOOLCHAIN=local go env GOVERSION)"; have="${have#go}"
  if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | tail -n1)" != "$have" ]; then
    log "k8s.io/kubernetes needs Go $need, this machine has $have: GOTOOLCHAIN=$NEWER_GO"
    export GOTOOLCHAIN="$NEWER_GO"
  else
    export GOTOOLCHAIN=local
  fi
}

# The module requiring k8s.io/kubernetes; staging modules pinned to v0.MINOR.PATCH.
write_kube_module() {
  local version="$1" upstream_mod="$2" dir="$3"
  local staging="v0.${version#v1.}"
  mkdir -p "$dir"
  {
    printf 'module kubeless.invalid/k8s-build\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\n' \
      "$(go mod edit -json "$upstream_mod" | sed -n 's/^\t"Go": "\(.*\)",\{0,1\}$/\1/p')" "$version"
    printf 'replace (\n'
    # The release's go.mod replaces each staging module by ./staging/src/k8s.io/NAME: the same
    # modules are published as k8s.io/NAME v0.MINOR.PATCH.
    go mod edit -json "$upstream_mod" \
      | sed -n 's/^\t\t\t"Path": "\(k8s\.io\/[^"]*\)",\{0,1\}$/\1/p' \
      | sort -u | while read -r path; do
        if grep -q "^[[:space:]]*$path => ./staging/" "$upstream_mod"; then
          printf '\t%s => %s %s\n' "$path" "$path" "$staging"
        fi
      done
    printf ')\n'
  } >"$dir/go.mod"
  # Blank imports of the commands, so `go mod tidy` records everything they need; never built.
  cat >"$dir/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
EOF
}

write_etcd_module() {
  local etcd_version="$1" dir="$2"
  mkdir -p "$dir"
  printf 'module kubeless.invalid/etcd-build\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$etcd_version" >"$dir/go.mod"
  cat >"$dir/main.go" <<'EOF'
// etcd's own command (etcdmain), as the etcd binary of that release runs it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
}

kube_ldflags() {
  local version="$1" minor
  minor="${version#v1.}"; minor="${minor%%.*}"
  local flags="-s -w" key val
  for kv in "gitVersion=$version" "gitMajor=1" "gitMinor=$minor" "gitTreeState=clean" \
    "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
    key="${kv%%=*}"; val="${kv#*=}"
    flags+=" -X k8s.io/component-base/version.$key=$val -X k8s.io/client-go/pkg/version.$key=$val"
  done
  printf '%s' "$flags"
}

build_version() {
  local version="$1"
  local base="$CACHE/$version" bin="$CACHE/$version/bin" work="$CACHE/$version/work"
  local stamp="$bin/.built"
  if [ -f "$stamp" ] && [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kube-controller-manager" ] \
    && [ -x "$bin/kube-scheduler" ] && [ -x "$bin/etcd" ]; then
    log "$version: cached in $bin ($(cat "$stamp"))"
    return 0
  fi
  local total=$SECONDS
  mkdir -p "$bin" "$work"
  export GOFLAGS=-trimpath
  step "$version: download k8s.io/kubernetes" \
    go mod download k8s.io/kubernetes@"$version"
  local upstream_dir upstream_mod etcd_version
  upstream_dir="$(GOTOOLCHAIN=local go mod download -json k8s.io/kubernetes@"$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  upstream_mod="$upstream_dir/go.mod"
  choose_toolchain "$upstream_mod"
  # The published module carries the generated OpenAPI definitions kube-apiserver links against.
  if [ ! -f "$upstream_dir/pkg/generated/openapi/zz_generated.openapi.go" ]; then
    log "$version: k8s.io/kubernetes has no pkg/generated/openapi/zz_generated.openapi.go; this script builds only releases that ship it"
    return 1
  fi
  # etcd at the version of the client this release uses (its go.mod `require`).
  etcd_version="$(go mod edit -json "$upstream_mod" | grep -A1 '"Path": "go.etcd.io/etcd/client/v3"' | sed -n 's/.*"Version": "\(.*\)".*/\1/p')"
  [ -n "$etcd_version" ] || { log "$version: no go.etcd.io/etcd/client/v3 in its go.mod"; return 1; }

  write_kube_module "$version" "$upstream_mod" "$work/kube"
  write_etcd_module "$etcd_version" "$work/etcd"
  step "$version: go mod tidy (kubernetes)" bash -c "cd '$work/kube' && go mod tidy"
  step "$version: go mod tidy (etcd $etcd_version)" bash -c "cd '$work/etcd' && go mod tidy"
  step "$version: build kube-apiserver kube-controller-manager kube-scheduler" \
    bash -c "cd '$work/kube' && nice -n 10 go build -ldflags '$(kube_ldflags "$version")' -o '$bin/' \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler"
  step "$version: build etcd $etcd_version" \
    bash -c "cd '$work/etcd' && nice -n 10 go build -ldflags '-s -w' -o '$bin/etcd' ."
  "$bin/kube-apiserver" --version >&2
  "$bin/etcd" --version | head -n1 >&2
  printf 'kubernetes %s, etcd %s, %s, built %s in %d s\n' "$version" "$etcd_version" \
    "$(go env GOVERSION)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((SECONDS - total))" >"$stamp"
  log "$version: built in $((SECONDS - total)) s into $bin"
}

[ $# -gt 0 ] || set -- "${DEFAULT_VERSIONS[@]}"
for v in "$@"; do
  ( build_version "$v" )
done
