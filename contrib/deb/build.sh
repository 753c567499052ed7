#!/usr/bin/env bash
# Builds the Debian package nsq-rs_<version>-1_<arch>.deb with dpkg-deb (Debian's own tool,
# from dpkg-dev's sibling package dpkg; nothing from outside Debian), from the binaries of
# the release archive (contrib/dist.sh, which it runs first):
#
#   /usr/bin/{nsqd,nsqlookupd,nsqadmin,nsq_stat,nsq_tail,nsq_to_file,nsq_to_http,nsq_to_nsq,to_nsq}
#   /lib/systemd/system/{nsqd,nsqlookupd,nsqadmin}.service   from contrib/*.service:
#                         ExecStart in /usr/bin, User=nsq instead of DynamicUser
#   /etc/nsq/{nsqd,nsqlookupd,nsqadmin}.cfg                    contrib/*.cfg.example (conffiles)
#   /usr/share/doc/nsq-rs/{copyright,changelog.Debian.gz,README.md.gz}
#   maintainer scripts contrib/deb/{postinst,prerm,postrm}: the system user nsq and
#   /var/lib/nsqd on install; data left on removal
#
# Usage: contrib/deb/build.sh              release binaries -> target/dist/
#        PROFILE=debug contrib/deb/build.sh  debug binaries -> target/dist/debug/ (CI)
# Environment: as contrib/dist.sh (PROFILE, NO_BUILD, GLIBC_MAX), MAINTAINER, ARCHIVE (use
# this archive of contrib/dist.sh instead of running it).
# The last line printed on stdout is the package's path.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
HERE=$ROOT/contrib/deb
BINS=(nsqd nsqlookupd nsqadmin nsq_stat nsq_tail nsq_to_file nsq_to_http nsq_to_nsq to_nsq)
DAEMONS=(nsqd nsqlookupd nsqadmin)
MAINTAINER=${MAINTAINER:-NSQ in Rust maintainers <nsq-rs@example.org>}
log() { echo "deb: $*" >&2; }

# ARCHIVE: an archive contrib/dist.sh already made (else it runs now).
archive=${ARCHIVE:-$(contrib/dist.sh | tail -n 1)}
OUT=$(dirname "$archive")
name=$(basename "$archive" .tar.gz) # nsq-rs-<version>.linux-<arch>
version=${name#nsq-rs-}
version=${version%.linux-*}
arch=$(dpkg --print-architecture)
debversion=$version-1
deb=$OUT/nsq-rs_${debversion}_$arch.deb

pkg=$(mktemp -d)
trap 'rm -rf "$pkg"' EXIT
tar -xzf "$archive" -C "$pkg"
src=$pkg/$name
root=$pkg/root
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/nsq" \
    "$root/usr/share/doc/nsq-rs"

# Binaries, stripped as dh_strip does (Debian ships debug symbols in separate -dbgsym
# packages; the archive keeps its symbol tables for backtraces).
for b in "${BINS[@]}"; do
    strip --remove-section=.comment --remove-section=.note --strip-unneeded \
        -o "$root/usr/bin/$b" "$src/bin/$b"
    chmod 0755 "$root/usr/bin/$b"
done

# systemd units: contrib/*.service with the package's paths and a fixed system user.
for d in "${DAEMONS[@]}"; do
    {
        echo "# systemd unit for $d, installed by the nsq-rs package. Configuration:"
        echo "# /etc/nsq/$d.cfg; then: systemctl enable --now $d"
        [[ $d == nsqd ]] && echo "# Messages are kept in /var/lib/nsqd (the working directory)."
        sed -e '1,/^\[Unit\]/{/^\[Unit\]/!d}' \
            -e 's#/usr/local/bin/#/usr/bin/#g' \
            -e '/^# A system user created on the fly/,/^# manage the account yourself/d' \
            -e 's/^DynamicUser=yes$/User=nsq\nGroup=nsq/' \
            "contrib/$d.service"
    } >"$root/lib/systemd/system/$d.service"
    chmod 0644 "$root/lib/systemd/system/$d.service"
    grep -q '^ExecStart=/usr/bin/' "$root/lib/systemd/system/$d.service" ||
        { log "ERROR: contrib/$d.service: ExecStart not rewritten"; exit 1; }
    grep -q '^User=nsq$' "$root/lib/systemd/system/$d.service" ||
        { log "ERROR: contrib/$d.service: no DynamicUser=yes to replace"; exit 1; }
    install -m 0644 "contrib/$d.cfg.example" "$root/etc/nsq/$d.cfg"
    echo "/etc/nsq/$d.cfg" >>"$root/DEBIAN/conffiles"
done

# Documentation: machine-readable copyright, a changelog, the README.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
{
    echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
    echo "Upstream-Name: nsq-rs"
    echo ""
    echo "Files: *"
    echo "Copyright: $(sed -n 's/^Copyright (c) //p' LICENSE | head -n 1)"
    echo "License: Expat"
    echo ""
    echo "License: Expat"
    sed -n '/^Permission is hereby granted/,$p' LICENSE | sed -e 's/^$/./' -e 's/^/ /'
} >"$root/usr/share/doc/nsq-rs/copyright"
{
    echo "nsq-rs ($debversion) unstable; urgency=medium"
    echo ""
    echo "  * Package of nsq-rs $version, built from commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
    echo ""
    echo " -- $MAINTAINER  $(date -u -R -d "@$epoch")"
} | gzip -n -9 >"$root/usr/share/doc/nsq-rs/changelog.Debian.gz"
gzip -n -9 <README.md >"$root/usr/share/doc/nsq-rs/README.md.gz"
chmod 0644 "$root/usr/share/doc/nsq-rs/"*

# Maintainer scripts and control.
for s in postinst prerm postrm; do
    install -m 0755 "$HERE/$s" "$root/DEBIAN/$s"
done
glibc=$(objdump -T "$root"/usr/bin/* | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
depends="libc6 (>= $glibc), init-system-helpers (>= 1.52)"
if objdump -p "$root"/usr/bin/* | grep -q 'NEEDED *libgcc_s\.so\.1'; then
    depends="libc6 (>= $glibc), libgcc-s1 (>= 4.2), init-system-helpers (>= 1.52)"
fi
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$debversion/" -e "s/@ARCH@/$arch/" -e "s/@MAINTAINER@/$MAINTAINER/" \
    -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/$depends/" "$HERE/control.in" >"$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
find "$root" -type d -exec chmod 0755 {} +
find "$root" -exec touch -h -d "@$epoch" {} +

rm -f "$deb"
# xz as Debian's own packages; the debug package of CI fast (gzip -1: xz takes a minute).
compress=(-Zxz)
[[ $OUT == */dist/debug ]] && compress=(-Zgzip -z1)
SOURCE_DATE_EPOCH=$epoch dpkg-deb --root-owner-group "${compress[@]}" --build "$root" "$deb" >&2
log "$(du -h "$deb" | cut -f1) $deb"
echo "$deb"
