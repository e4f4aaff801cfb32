#!/bin/sh
# Assemble the minimal root filesystem of a Rust service image in OUT: the binaries given, the
# shared libraries ldd lists for them (with the dynamic loader), the CA certificates, a passwd
# and group entry for the numeric user 65532 ("nonroot") and a writable /tmp. Runs inside the
# build stage of the Dockerfiles (from the local Debian base image), never in the final image.
# Usage: rootfs.sh OUT BINARY...
set -eu
out="$1"; shift
mkdir -p "$out/etc/ssl/certs" "$out/tmp" "$out/home/nonroot"
chmod 1777 "$out/tmp"
for bin in "$@"; do
  for lib in $(ldd "$bin" | awk '/=> \// { print $3 } /^[ \t]*\/lib/ { print $1 }'); do
    real="$(readlink -f "$lib")"
    mkdir -p "$out$(dirname "$lib")"
    cp "$real" "$out$lib"
  done
done
cp /etc/ssl/certs/ca-certificates.crt "$out/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$out/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$out/etc/group"
chown 65532:65532 "$out/home/nonroot"
