#!/usr/bin/env bash
# Build every kubeless-rs image without a Docker daemon (buildah), and push them to a registry.
#
#   scripts/images.sh build [NAME...]        build the images (default: all), print times and sizes
#   scripts/images.sh push REGISTRY [NAME...] push them to REGISTRY (host:port, plain HTTP;
#                                            KUBELESS_REGISTRY_CREDS=USER:PASSWORD logs in)
#   scripts/images.sh registry-start DIR [USER:PASSWORD]
#                                            run Debian's docker-registry on 127.0.0.1:<free port>
#                                            with its storage in DIR (and basic auth for that one
#                                            user when given); prints host:port
#   scripts/images.sh registry-stop DIR      stop it (by the PID it wrote in DIR)
#   scripts/images.sh base                   make the Debian base image (debootstrap, cached)
#   scripts/images.sh names                  list NAME TAG DOCKERFILE of every image
#
# Inputs: the Dockerfiles in the repo, the binaries of `cargo build --profile image` (built here
# unless KUBELESS_IMAGE_SKIP_CARGO=1), and a Debian bookworm base image made once with
# debootstrap and cached (tarball under KUBELESS_IMAGE_CACHE, image in buildah's storage), so a
# rebuild with unchanged inputs reuses every layer. See docs/images.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CACHE="${KUBELESS_IMAGE_CACHE:-$HOME/.cache/kubeless-rs/images}"
BASE_IMAGE="localhost/kubeless-rs/debian-base:bookworm"
MIRROR="${KUBELESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -n1)"
REVISION="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
SOURCE="${KUBELESS_IMAGE_SOURCE:-https://github.com/kubeless-rs/kubeless-rs}"
NODE_MAJOR=""
command -v node >/dev/null 2>&1 && NODE_MAJOR="$(node --version | sed 's/^v\([0-9]*\).*/\1/')"

# NAME TAG DOCKERFILE, one image a line.
images() {
  cat <<EOF
function-controller $VERSION services/function-controller/Dockerfile
http-trigger-controller $VERSION services/http-trigger-controller/Dockerfile
cronjob-trigger-controller $VERSION services/cronjob-trigger-controller/Dockerfile
cron-invoker $VERSION services/cronjob-trigger-controller/Dockerfile.invoker
nats-trigger $VERSION services/nats-trigger/Dockerfile
kafka-trigger $VERSION services/kafka-trigger/Dockerfile
kinesis-trigger $VERSION services/kinesis-trigger/Dockerfile
redis-trigger $VERSION services/redis-trigger/Dockerfile
builder $VERSION builder/Dockerfile
runtime-python 3.11 runtimes/python/Dockerfile
runtime-nodejs ${NODE_MAJOR:-none} runtimes/nodejs/Dockerfile
runtime-ruby 3.1 runtimes/ruby/Dockerfile
runtime-php 8.2 runtimes/php/Dockerfile
runtime-go 1.19 runtimes/go/Dockerfile
runtime-java 17 runtimes/java/Dockerfile
dashboard $VERSION cli/Dockerfile
EOF
}

selected() {
  if [ $# -eq 0 ]; then images; return; fi
  local name
  for name in "$@"; do
    images | awk -v n="$name" '$1 == n { print; found = 1 } END { exit !found }' \
      || { echo "unknown image $name (see: scripts/images.sh names)" >&2; exit 2; }
  done
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# The Debian base: debootstrap once (tarball cached outside the checkout), imported once.
ensure_base() {
  if buildah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    return 0
  fi
  local tarball="$CACHE/debian-bookworm-minbase.tar" start
  start="$(now)"
  mkdir -p "$CACHE"
  if [ ! -s "$tarball" ]; then
    local dir="$CACHE/rootfs.tmp"
    rm -rf "$dir"
    log "debootstrap bookworm (minbase) from $MIRROR"
    # ca-certificates for TLS clients; libssl3 and zlib for kafka-trigger's librdkafka.
    debootstrap --variant=minbase --include=ca-certificates,libssl3,zlib1g \
      bookworm "$dir" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar -C "$dir" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$dir"
  fi
  local ctr
  ctr="$(buildah from scratch)"
  buildah add --quiet "$ctr" "$tarball" / >/dev/null
  buildah config --cmd /bin/bash --label org.opencontainers.image.title=kubeless-rs/debian-base "$ctr"
  buildah commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
  echo "BASE $BASE_IMAGE $(since "$start")s"
}

# The binaries an image's Dockerfile copies from bin/.
binaries_of() {
  sed -n 's|^COPY bin/\([^ ]*\) .*|\1|p' "$ROOT/$1"
}

# cargo's -p/--bin arguments for one binary.
cargo_args_of() {
  case "$1" in
    kubeless-cron-invoker) echo "-p cronjob-trigger-controller --bin kubeless-cron-invoker" ;;
    kubeless-runtime) echo "-p kubeless-runtime --bin kubeless-runtime" ;;
    kubeless) echo "-p kubeless-cli --bin kubeless" ;;
    *) echo "-p $1 --bin $1" ;;
  esac
}

# bin/ (stripped release binaries of the selected images), images/rootfs.sh, runtimes/ and node/
# in one build context. Arguments: the Dockerfiles of the selected images.
#
# cargo builds every image's binary by default, whatever is selected: one set of packages means
# one feature unification, so the dependencies built for `build` (all images, as scripts/test.sh
# runs it) also serve `build NAME`. KUBELESS_IMAGE_CARGO=selected builds only the binaries the
# selected images copy (much less on a cold target dir; another feature set, so built apart).
prepare_context() {
  local ctx="$CACHE/context" target="$CARGO_TARGET_DIR/image" dockerfile b
  local -a bins=() args=() build=()
  for dockerfile in "$@"; do
    for b in $(binaries_of "$dockerfile"); do
      case " ${bins[*]} " in *" $b "*) ;; *) bins+=("$b") ;; esac
    done
  done
  if [ "${KUBELESS_IMAGE_CARGO:-all}" = selected ]; then
    build=("${bins[@]}")
  else
    for dockerfile in $(images | awk '{ print $3 }'); do
      for b in $(binaries_of "$dockerfile"); do
        case " ${build[*]} " in *" $b "*) ;; *) build+=("$b") ;; esac
      done
    done
  fi
  if [ "${KUBELESS_IMAGE_SKIP_CARGO:-0}" != 1 ] && [ ${#build[@]} -gt 0 ]; then
    local start
    start="$(now)"
    for b in "${build[@]}"; do
      # shellcheck disable=SC2207
      args+=($(cargo_args_of "$b"))
    done
    # --no-default-features drops the CLI's broker clients (the dashboard image needs none);
    # no other crate built here has default features.
    cargo build --locked --profile image "${args[@]}" --no-default-features >&2
    echo "CARGO --profile image $(since "$start")s" >&2
  fi
  mkdir -p "$ctx/bin" "$ctx/images" "$ctx/runtimes"
  for b in "${bins[@]}"; do
    [ -x "$target/$b" ] || { echo "missing $target/$b: run scripts/images.sh build (cargo build --profile image) first" >&2; exit 1; }
    # cp only on change, so the build context (and every layer after it) stays cached.
    cmp -s "$target/$b" "$ctx/bin/$b" || cp "$target/$b" "$ctx/bin/$b"
  done
  cp -u "$ROOT/scripts/images/rootfs.sh" "$ctx/images/rootfs.sh"
  rm -rf "$ctx/runtimes"
  cp -r "$ROOT/runtimes" "$ctx/runtimes"
  rm -rf "$ctx/runtimes/proxy"
  if [ -n "$NODE_MAJOR" ]; then
    mkdir -p "$ctx/node/bin" "$ctx/node/lib/node_modules"
    local node npm
    node="$(readlink -f "$(command -v node)")"
    npm="$(dirname "$node")/../lib/node_modules/npm"
    cmp -s "$node" "$ctx/node/bin/node" || cp "$node" "$ctx/node/bin/node"
    [ -d "$ctx/node/lib/node_modules/npm" ] || cp -r "$npm" "$ctx/node/lib/node_modules/npm"
  fi
  echo "$ctx"
}

image_size() {
  podman image inspect --format '{{.Size}}' "$1"
}

cmd_build() {
  local total ctx
  total="$(now)"
  ensure_base
  # shellcheck disable=SC2046
  ctx="$(prepare_context $(selected "$@" | awk '{ print $3 }') | tail -n1)"
  selected "$@" | while read -r name tag dockerfile; do
    if [ "$name" = runtime-nodejs ] && [ "$tag" = none ]; then
      echo "runtime-nodejs needs node (20 or 22) on PATH to copy into the image" >&2
      exit 1
    fi
    # The labels also go on the command line: buildah 1.28's layer cache does not see a changed
    # build argument, so a cached LABEL layer would keep the previous commit's revision.
    local start ref="localhost/kubeless-rs/$name:$tag"
    start="$(now)"
    buildah bud --quiet --isolation chroot --layers \
      --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "VERSION=$VERSION" \
      --build-arg "REVISION=$REVISION" --build-arg "SOURCE=$SOURCE" \
      --build-arg "NODE_VERSION=$tag" \
      --label "org.opencontainers.image.version=$VERSION" \
      --label "org.opencontainers.image.revision=$REVISION" \
      --label "org.opencontainers.image.source=$SOURCE" \
      -f "$ROOT/$dockerfile" -t "$ref" "$ctx" >/dev/null
    echo "IMAGE $name $ref $(image_size "$ref") $(since "$start")s"
  done
  echo "TOTAL $(since "$total")s"
}

cmd_push() {
  local registry="${1:?usage: images.sh push REGISTRY [NAME...]}"
  shift
  selected "$@" | while read -r name tag _; do
    local ref="localhost/kubeless-rs/$name:$tag" dest="$registry/kubeless-rs/$name:$tag"
    local digestfile
    digestfile="$(mktemp)"
    local -a creds=()
    [ -n "${KUBELESS_REGISTRY_CREDS:-}" ] && creds=(--creds "$KUBELESS_REGISTRY_CREDS")
    buildah push --quiet --tls-verify=false "${creds[@]}" --digestfile "$digestfile" "$ref" "docker://$dest" >/dev/null
    echo "PUSHED $dest@$(cat "$digestfile")"
    rm -f "$digestfile"
  done
}

cmd_registry_start() {
  local dir="${1:?usage: images.sh registry-start DIR [USER:PASSWORD]}" creds="${2:-}" port auth=""
  mkdir -p "$dir/data"
  if [ -n "$creds" ]; then
    # htpasswd with a bcrypt hash (what docker-registry accepts), made with Python's crypt.
    python3 -W ignore -c 'import crypt, sys; u, p = sys.argv[1].split(":", 1); print(u + ":" + crypt.crypt(p, crypt.mksalt(crypt.METHOD_BLOWFISH)))' "$creds" >"$dir/htpasswd"
    auth="auth:
  htpasswd:
    realm: kubeless-rs
    path: $dir/htpasswd"
  fi
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
$auth
EOF
  docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
  echo $! >"$dir/pid"
  local i
  for i in $(seq 1 100); do
    # Any HTTP answer (401 with auth) means it serves.
    if python3 -c "import urllib.request, urllib.error
try: urllib.request.urlopen('http://127.0.0.1:$port/v2/', timeout=1)
except urllib.error.HTTPError: pass" 2>/dev/null; then
      echo "127.0.0.1:$port"
      return 0
    fi
    sleep 0.1
  done
  echo "docker-registry did not answer on 127.0.0.1:$port; log: $dir/registry.log" >&2
  exit 1
}

cmd_registry_stop() {
  local dir="${1:?usage: images.sh registry-stop DIR}"
  [ -f "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null || true
  rm -f "$dir/pid"
}

case "${1:-}" in
  build) shift; cmd_build "$@" ;;
  push) shift; cmd_push "$@" ;;
  registry-start) shift; cmd_registry_start "$@" ;;
  registry-stop) shift; cmd_registry_stop "$@" ;;
  base) ensure_base ;;
  names) images ;;
  *) sed -n '2,15p' "$0" >&2; exit 2 ;;
esac
