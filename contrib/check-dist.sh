#!/usr/bin/env bash
# Checks an archive made by contrib/dist.sh: its SHA-256 file, its layout (the nine binaries
# under nsq-rs-<version>.linux-<arch>/bin/, LICENSE, README.md, nothing else), the glibc the
# binaries need (<= GLIBC_MAX, default 2.35), and that each binary runs from the unpacked
# archive (`--version`; to_nsq has no -version, as NSQ's: `-help`, which exits 0).
#
# Usage: contrib/check-dist.sh target/dist/nsq-rs-<version>.linux-<arch>.tar.gz
set -euo pipefail

ARCHIVE=$(realpath "$1")
GLIBC_MAX=${GLIBC_MAX:-2.35}
BINS=(nsqd nsqlookupd nsqadmin nsq_stat nsq_tail nsq_to_file nsq_to_http nsq_to_nsq to_nsq)
NAME=$(basename "$ARCHIVE" .tar.gz)
fail() {
    echo "check-dist: FAIL: $*" >&2
    exit 1
}

(cd "$(dirname "$ARCHIVE")" && sha256sum --quiet -c "$NAME.tar.gz.sha256") ||
    fail "sha256 mismatch"
echo "check-dist: sha256 ok"

want=$(printf '%s\n' "$NAME/" "$NAME/LICENSE" "$NAME/README.md" "$NAME/bin/" \
    "${BINS[@]/#/$NAME/bin/}" | sort)
have=$(tar -tzf "$ARCHIVE" | sort)
[[ $want == "$have" ]] || fail "layout differs: $(diff <(echo "$want") <(echo "$have") | tr '\n' ' ')"
echo "check-dist: layout ok ($(echo "$have" | wc -l) entries, all in $NAME/)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$ARCHIVE" -C "$tmp"
glibc=$(objdump -T "$tmp/$NAME"/bin/* | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
[[ $(printf '%s\n%s\n' "$glibc" "$GLIBC_MAX" | sort -V | tail -n 1) == "$GLIBC_MAX" ]] ||
    fail "binaries need glibc $glibc > $GLIBC_MAX"
echo "check-dist: binaries need glibc >= $glibc (<= $GLIBC_MAX: Ubuntu 22.04 has 2.35, Debian 12 2.36)"

for b in "${BINS[@]}"; do
    if [[ $b == to_nsq ]]; then
        out=$("$tmp/$NAME/bin/$b" -help 2>&1) || fail "$b -help exited $?"
        grep -q -- '-nsqd-tcp-address' <<<"$out" || fail "$b -help: no usage"
        echo "check-dist: $b -help: usage ($(wc -l <<<"$out") lines)"
    else
        out=$("$tmp/$NAME/bin/$b" --version 2>&1) || fail "$b --version exited $?"
        grep -q "$b v" <<<"$out" || fail "$b --version printed '$out'"
        echo "check-dist: $b --version: $out"
    fi
done
