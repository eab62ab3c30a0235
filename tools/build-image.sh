#!/usr/bin/env bash
# Builds the roadseg container image from Debian packages only (no container
# registry): mmdebstrap makes a Debian bookworm root (variant minbase) with the
# GStreamer runtime packages the .deb depends on, installs the project's own
# .deb into it, trims it (tools/image/slim.sh: the GStreamer plugins roadseg
# uses, no gst-libav), and podman turns it into an image (tools/image/Containerfile:
# user roadseg, volumes, ports, HEALTHCHECK, entry point), saved as
#   target/image/roadseg-<version>.oci.tar      (podman save --format oci-archive)
#   target/image/roadseg-<version>.docker.tar   (docker-archive: keeps the HEALTHCHECK)
# and left in podman's store as localhost/roadseg:<version>.
#
#   ./tools/build-image.sh                   # builds the .deb first (tools/build-deb.sh)
#   DEB=target/debian/roadseg_0.1.0_amd64.deb ./tools/build-image.sh   # an existing .deb
#   FULL=1 ./tools/build-image.sh            # untrimmed: everything the .deb depends on
#                                            # (gst-libav and all plugins): localhost/roadseg:<version>-full
#
# Needs root, podman, runc and mmdebstrap (apt-get install -y podman runc
# mmdebstrap) and the Debian mirror (MIRROR, default http://deb.debian.org).
# mmdebstrap hooks are shell snippets that mmdebstrap runs with the root as $1:
# single-quoted on purpose.
# shellcheck disable=SC2016
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | sed -n 1p)
arch=$(dpkg --print-architecture)
suite=bookworm
mirror=${MIRROR:-http://deb.debian.org}
full=${FULL:-0}
flavour=""
[ "$full" = 1 ] && flavour=-full
image=${IMAGE:-localhost/roadseg:$version$flavour}
out=target/image

if [ -z "${DEB:-}" ]; then
  ./tools/build-deb.sh
  DEB=target/debian/roadseg_${version}_${arch}.deb
fi
[ -f "$DEB" ] || { echo "build-image: $DEB not found" >&2; exit 1; }
DEB=$(realpath "$DEB")
for tool in mmdebstrap podman; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool missing: apt-get install -y podman runc mmdebstrap" >&2; exit 1; }
done

# podman on these machines: runc (crun refuses hybrid cgroups) and no default
# ulimits (docs in /work/shared/containers.md). A CONTAINERS_CONF given by the
# caller wins.
if [ -z "${CONTAINERS_CONF:-}" ]; then
  export CONTAINERS_CONF=$PWD/$out/containers.conf
  mkdir -p "$out"
  printf '[containers]\ndefault_ulimits = []\n' > "$CONTAINERS_CONF"
fi
runtime=()
[ -x /usr/sbin/runc ] && runtime=(--runtime /usr/sbin/runc)

# The .deb's Depends, as package names (no versions, first of any alternatives).
deps=$(dpkg-deb -f "$DEB" Depends | tr ',' '\n' | sed 's/[(|].*//; s/[[:space:]]//g' | grep . | paste -sd, -)
echo "build-image: $suite root with $deps"

mkdir -p "$out"
rootfs=$out/rootfs$flavour.tar
rm -f "$rootfs"
# The account gets a fixed uid/gid (10001, what deploy/kubernetes runs as), made
# before the .deb: its postinst (systemd-sysusers) keeps an existing account
# and adds it to the video and render groups.
uid=${ROADSEG_UID:-10001}
hooks=(
  --customize-hook="chroot \"\$1\" groupadd --system --gid $uid roadseg"
  --customize-hook="chroot \"\$1\" useradd --system --uid $uid --gid $uid --home-dir /var/lib/roadseg --no-create-home --shell /usr/sbin/nologin --comment 'roadseg daemon' roadseg"
  --customize-hook="copy-in $DEB /tmp"
  --customize-hook='chroot "$1" dpkg -i /tmp/'"$(basename "$DEB")"
  --customize-hook='rm -f "$1"/tmp/*.deb'
  # The image's default config: the package's (model under /usr/share/roadseg),
  # listening on every address of the container, so -p can publish the ports;
  # such an address needs credentials (README "Container image").
  --customize-hook='sed -i "s|^listen = \"127.0.0.1:9464\"|listen = \"0.0.0.0:9464\"|; s|^listen = \"127.0.0.1:8554\"|listen = \"0.0.0.0:8554\"|" "$1/etc/roadseg/roadseg.toml"'
  --customize-hook='grep -q "^listen = \"0.0.0.0:9464\"" "$1/etc/roadseg/roadseg.toml" && grep -q "^listen = \"0.0.0.0:8554\"" "$1/etc/roadseg/roadseg.toml"'
  # The working directory and volume: owned by the service account.
  --customize-hook='chroot "$1" install -d -o roadseg -g roadseg -m 0750 /var/lib/roadseg' \
  --customize-hook='chroot "$1" install -d -o roadseg -g roadseg -m 0750 /var/cache/roadseg'
  --customize-hook="test \"\$(chroot \"\$1\" id -u roadseg)\" = $uid"
)
if [ "$full" != 1 ]; then
  hooks+=(
    --customize-hook="upload tools/image/slim.sh /tmp/slim.sh"
    --customize-hook='chroot "$1" sh /tmp/slim.sh'
    --customize-hook='rm -f "$1/tmp/slim.sh"'
  )
fi
hooks+=(--customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old')

# Manual pages, documentation (but the copyright files) and translations are
# not installed; apt installs no Recommends.
mmdebstrap --variant=minbase --mode=root --format=tar --include="ca-certificates,curl,$deps" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-include=/usr/share/doc/roadseg/*' \
  "${hooks[@]}" \
  "$suite" "$rootfs" \
  "deb $mirror/debian $suite main" "deb $mirror/debian $suite-updates main" "deb $mirror/debian-security $suite-security main"

rootfs_image=localhost/roadseg-rootfs:$version$flavour
podman import "$rootfs" "$rootfs_image" >/dev/null
podman "${runtime[@]}" build --format docker --pull=never --build-arg ROOTFS="$rootfs_image" --build-arg VERSION="$version" \
  -f tools/image/Containerfile -t "$image" tools/image
podman rmi "$rootfs_image" >/dev/null
rm -f "$rootfs"

oci=$out/roadseg-$version$flavour.oci.tar
docker_tar=$out/roadseg-$version$flavour.docker.tar
rm -f "$oci" "$docker_tar"
podman save --format oci-archive -o "$oci" "$image"
podman save --format docker-archive -o "$docker_tar" "$image"

size=$(podman image inspect --format '{{.Size}}' "$image")
echo "build-image: $image, $((size / 1000000)) MB ($size bytes; podman image inspect .Size)"
echo "build-image: $(du -m "$oci" | cut -f1) MB $oci"
echo "build-image: $(du -m "$docker_tar" | cut -f1) MB $docker_tar"
