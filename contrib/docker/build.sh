#!/usr/bin/env bash
# Builds the container image nsq-rs:<version> (and nsq-rs:latest) from contrib/docker/Dockerfile
# with podman (or docker: CONTAINER_CLI=docker), without pulling any base image: the build
# context is made here from the archive of contrib/dist.sh:
#
#   rootfs/usr/local/bin/<nine binaries>, rootfs/<name> -> usr/local/bin/<name> (NSQ's paths)
#   rootfs/<the shared libraries ldd lists for them>, with the dynamic loader
#   rootfs/etc/{passwd,group,nsswitch.conf}: root and nsq (uid/gid 10001); rootfs/tmp (1777)
#   data/: the empty volume, owned by nsq in the image
#
# Usage: contrib/docker/build.sh                 release archive (built if needed)
#        PROFILE=debug contrib/docker/build.sh   the debug archive (CI)
# Environment: as contrib/dist.sh (PROFILE, NO_BUILD), ARCHIVE (use this archive),
# CONTAINER_CLI (podman), IMAGE (default nsq-rs). The last line on stdout is the image's name.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
CLI=${CONTAINER_CLI:-podman}
IMAGE=${IMAGE:-nsq-rs}
log() { echo "image: $*" >&2; }

archive=${ARCHIVE:-$(contrib/dist.sh | tail -n 1)}
name=$(basename "$archive" .tar.gz)
version=${name#nsq-rs-}
version=${version%.linux-*}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
tar -xzf "$archive" -C "$ctx"
rootfs=$ctx/rootfs
install -d -m 0755 "$rootfs/usr/local/bin" "$rootfs/etc" "$ctx/data"
install -d -m 1777 "$rootfs/tmp"
# Mount points a container runtime fills (Docker and podman make them anyway).
install -d -m 0755 "$rootfs/proc" "$rootfs/sys" "$rootfs/dev"
for b in "$ctx/$name"/bin/*; do
    install -m 0755 "$b" "$rootfs/usr/local/bin/"
    ln -s "usr/local/bin/$(basename "$b")" "$rootfs/$(basename "$b")"
done

# The libraries the binaries load: each path ldd resolves, and the loader itself, copied
# under the same path (the binaries' PT_INTERP is an absolute path).
libs=$(for b in "$rootfs"/usr/local/bin/*; do ldd "$b"; done |
    awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
[[ -n $libs ]] || { log "ERROR: ldd listed no library"; exit 1; }
for l in $libs; do
    cp -L --parents "$l" "$rootfs/"
done
log "libraries: $(echo $libs)"

cat >"$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nsq:x:10001:10001:nsq:/data:/sbin/nologin
PASSWD
cat >"$rootfs/etc/group" <<'GROUP'
root:x:0:
nsq:x:10001:
GROUP
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$rootfs/etc/nsswitch.conf"
chmod 0644 "$rootfs"/etc/*

log "$CLI build -t $IMAGE:$version -t $IMAGE:latest ($(du -sh "$rootfs" | cut -f1) root)"
# podman: --layers=false commits the final image only (no intermediate image per step).
extra=()
[[ $(basename "$CLI") == podman ]] && extra=(--layers=false)
"$CLI" build "${extra[@]}" --pull=never -f contrib/docker/Dockerfile -t "$IMAGE:$version" -t "$IMAGE:latest" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)" \
    --label "org.opencontainers.image.licenses=MIT" \
    --label "org.opencontainers.image.title=nsq-rs" \
    "$ctx" >&2
echo "$IMAGE:$version"
