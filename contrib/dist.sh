#!/usr/bin/env bash
# Builds the release archive, in NSQ's layout (its dist.sh):
#
#   target/dist/nsq-rs-<version>.linux-<arch>.tar.gz          (+ .sha256)
#     nsq-rs-<version>.linux-<arch>/bin/{nsqd,nsqlookupd,nsqadmin,nsq_stat,nsq_tail,
#                                        nsq_to_file,nsq_to_http,nsq_to_nsq,to_nsq}
#     nsq-rs-<version>.linux-<arch>/LICENSE
#     nsq-rs-<version>.linux-<arch>/README.md
#
# Usage: contrib/dist.sh            release build (what a user runs; see contrib/README.md)
#        PROFILE=debug contrib/dist.sh
#                                   packs the debug binaries instead (CI: they are already
#                                   built), into target/dist/debug/; never ship that one
#
# Environment: PROFILE (release|debug, default release), CARGO_BUILD_JOBS (cargo's own),
# GLIBC_MAX (default 2.35: the newest glibc symbol version the binaries may need, Ubuntu
# 22.04's; Debian 12 has 2.36), NO_BUILD=1 (pack what is in target/<profile> as it is).
#
# The binaries lose their debug sections (strip --strip-debug) but keep their symbol tables,
# so a panic's backtrace still names functions. The version is [workspace.package] version
# of the root Cargo.toml. The last line printed on stdout is the archive's path.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
PROFILE=${PROFILE:-release}
GLIBC_MAX=${GLIBC_MAX:-2.35}
BINS=(nsqd nsqlookupd nsqadmin nsq_stat nsq_tail nsq_to_file nsq_to_http nsq_to_nsq to_nsq)

log() { echo "dist: $*" >&2; }
die() {
    echo "dist: ERROR: $*" >&2
    exit 1
}

# The debug archive is only for CI to exercise: compressed fast, not small.
case $PROFILE in
release) OUT=$ROOT/target/dist GZIP_LEVEL=-9 ;;
debug) OUT=$ROOT/target/dist/debug GZIP_LEVEL=-1 ;;
*) die "PROFILE must be release or debug (got '$PROFILE')" ;;
esac

VERSION=$(awk '/^\[workspace.package\]/{p=1; next} /^\[/{p=0} p && /^version *=/{gsub(/"/, "", $3); print $3; exit}' Cargo.toml)
[[ -n $VERSION ]] || die "no [workspace.package] version in Cargo.toml"
case $(uname -m) in
x86_64) ARCH=amd64 ;;
aarch64) ARCH=arm64 ;;
armv7l) ARCH=armv7 ;;
*) ARCH=$(uname -m) ;;
esac
NAME=nsq-rs-$VERSION.linux-$ARCH

if [[ ${NO_BUILD:-0} != 1 ]]; then
    pkgs=()
    for b in "${BINS[@]}"; do pkgs+=(-p "$b-bin"); done
    log "cargo build --profile $PROFILE ${pkgs[*]}"
    start=$(date +%s)
    # `--profile dev` is cargo's name for the debug profile (output in target/debug).
    cargo build --locked --profile "$([[ $PROFILE == debug ]] && echo dev || echo release)" "${pkgs[@]}"
    log "build took $(($(date +%s) - start)) s"
fi

for b in "${BINS[@]}"; do
    [[ -x target/$PROFILE/$b ]] || die "target/$PROFILE/$b is missing (build it, or unset NO_BUILD)"
done

mkdir -p "$OUT"
STAGE=$OUT/$NAME
rm -rf "$STAGE" "$OUT/$NAME.tar.gz" "$OUT/$NAME.tar.gz.sha256"
mkdir -p "$STAGE/bin"
for b in "${BINS[@]}"; do
    strip --strip-debug -o "$STAGE/bin/$b" "target/$PROFILE/$b"
    chmod 0755 "$STAGE/bin/$b"
done
install -m 0644 LICENSE README.md "$STAGE/"

# The newest GLIBC_x.y symbol version any binary needs: the oldest glibc they run on.
glibc_needed=$(objdump -T "$STAGE"/bin/* | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' |
    sort -uV | tail -n 1)
log "the binaries need glibc >= $glibc_needed (allowed: <= $GLIBC_MAX)"
if [[ $(printf '%s\n%s\n' "$glibc_needed" "$GLIBC_MAX" | sort -V | tail -n 1) != "$GLIBC_MAX" ]]; then
    die "the binaries need glibc $glibc_needed, newer than GLIBC_MAX=$GLIBC_MAX"
fi

# Reproducible: sorted names, root-owned, every mtime the last commit's.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    -C "$OUT" -cf - "$NAME" | gzip -n "$GZIP_LEVEL" >"$OUT/$NAME.tar.gz"
(cd "$OUT" && sha256sum "$NAME.tar.gz" >"$NAME.tar.gz.sha256")
log "$(du -h "$OUT/$NAME.tar.gz" | cut -f1) $OUT/$NAME.tar.gz ($PROFILE binaries)"
log "sha256 $(cut -d' ' -f1 "$OUT/$NAME.tar.gz.sha256")"
echo "$OUT/$NAME.tar.gz"
