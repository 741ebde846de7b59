#!/usr/bin/env bash
# Build an offline Python base image from Debian packages with debootstrap.
#
# Usage: docker/build-base-image.sh [TAG]   (default: local/py311-base:bookworm)
#
# The image is equivalent to python:3.11-slim-bookworm for our Dockerfiles (Debian bookworm,
# Python 3.11, python3-venv) and trusts this host's CA certificates, so containers reach PyPI
# through a TLS-intercepting proxy without bind mounts. Used on hosts that cannot pull images.
set -euo pipefail

TAG=${1:-local/py311-base:bookworm}
SUITE=bookworm
mirror_from_host() {
  awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null ||
    awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true
}
MIRROR=${DEBIAN_MIRROR:-$(mirror_from_host)}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

command -v debootstrap >/dev/null || { echo "build-base-image: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
ROOT=$(mktemp -d "${TMPDIR:-/tmp}/rootfs.XXXXXX")
trap 'rm -rf "$ROOT" "$ROOT.log"' EXIT

echo "build-base-image: debootstrap $SUITE from $MIRROR -> $TAG"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" "$ROOT" "$MIRROR" \
  >"$ROOT.log" 2>&1 || { tail -30 "$ROOT.log" >&2; exit 1; }

# Trust the host's CAs: individual certs (kept by a later update-ca-certificates) and the bundle.
cp /usr/local/share/ca-certificates/*.crt "$ROOT/usr/local/share/ca-certificates/" 2>/dev/null || true
chroot "$ROOT" update-ca-certificates >/dev/null 2>&1 || true
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"

cat >"$ROOT/etc/apt/sources.list" <<SRC
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb ${MIRROR%/debian}/debian-security $SUITE-security main
SRC
cat >"$ROOT/etc/dpkg/dpkg.cfg.d/01-nodoc" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
echo 'APT::Install-Recommends "false"; APT::Install-Suggests "false";' >"$ROOT/etc/apt/apt.conf.d/01-norecommends"
# Without this, every apt-get install in a derived image keeps its .debs in the layer.
cat >"$ROOT/etc/apt/apt.conf.d/docker-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
CFG

rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb \
  "$ROOT"/var/cache/debconf/*-old "$ROOT"/var/log/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/man/* \
  "$ROOT"/tmp/* "$ROOT"/var/tmp/*
find "$ROOT/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete
find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
find "$ROOT" -xdev -name __pycache__ -type d -prune -exec rm -rf {} +

CA=/etc/ssl/certs/ca-certificates.crt
tar --numeric-owner -C "$ROOT" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "ENV SSL_CERT_FILE=$CA" --change "ENV REQUESTS_CA_BUNDLE=$CA" \
  --change "ENV PIP_CERT=$CA" --change "ENV NODE_EXTRA_CA_CERTS=$CA" \
  --change 'ENV PIP_DISABLE_PIP_VERSION_CHECK=1' \
  --change 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
echo "build-base-image: built $TAG ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}'))"
