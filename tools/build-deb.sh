#!/usr/bin/env bash
# Builds target/debian/roadseg_<version>_<arch>.deb with dpkg-deb (no cargo-deb
# needed): the release binary, the bundled model under /usr/share/roadseg, the
# systemd unit, the sysusers entry and a default /etc/roadseg/roadseg.toml
# (a conffile) whose model path points at the shipped model.
#
#   ./tools/build-deb.sh            # (re)builds the release binary first
#   sudo apt install ./target/debian/roadseg_*.deb
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | sed -n 1p)
arch=$(dpkg --print-architecture)
bin=target/release/roadseg
# Always: a stale binary would not match the config it ships with.
cargo build --release --locked
out=target/debian
root=$out/roadseg_${version}_${arch}
rm -rf "$root"
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/roadseg/models" "$root/lib/systemd/system" \
  "$root/usr/lib/sysusers.d" "$root/etc/roadseg" "$root/usr/share/doc/roadseg"

# Debug info is for developers; the package carries the lean binary.
install -m 0755 "$bin" "$root/usr/bin/roadseg"
strip --strip-debug "$root/usr/bin/roadseg"
cp -r models/roadseg-camvid "$root/usr/share/roadseg/models/"
chmod -R u=rwX,go=rX "$root/usr/share/roadseg"
sed 's|/usr/local/bin/roadseg|/usr/bin/roadseg|' systemd/roadseg.service > "$root/lib/systemd/system/roadseg.service"
install -m 0644 systemd/sysusers.d-roadseg.conf "$root/usr/lib/sysusers.d/roadseg.conf"
sed 's|^path = "models/roadseg-camvid"|path = "/usr/share/roadseg/models/roadseg-camvid"|' config/default.toml > "$root/etc/roadseg/roadseg.toml"
grep -q '^path = "/usr/share/roadseg/models/roadseg-camvid"' "$root/etc/roadseg/roadseg.toml" ||
  { echo "build-deb: config/default.toml has no model path line to point at the shipped model" >&2; exit 1; }
install -m 0644 README.md "$root/usr/share/doc/roadseg/README.md"
install -m 0644 systemd/README.md "$root/usr/share/doc/roadseg/systemd.md"
install -m 0644 config/example-cameras.toml "$root/usr/share/doc/roadseg/example-cameras.toml"

installed_kb=$(du -sk "$root" --exclude=DEBIAN | cut -f1)
cat > "$root/DEBIAN/control" <<EOF
Package: roadseg
Version: $version
Architecture: $arch
Maintainer: roadseg developers <roadseg@localhost>
Installed-Size: $installed_kb
Depends: libc6, libgcc-s1, libgstreamer1.0-0, libgstreamer-plugins-base1.0-0, libgstrtspserver-1.0-0,
 gstreamer1.0-plugins-base, gstreamer1.0-plugins-good, gstreamer1.0-plugins-bad,
 gstreamer1.0-plugins-ugly, gstreamer1.0-libav
Suggests: nvidia-driver, libnvrtc12, libcublaslt12
Section: video
Priority: optional
Description: road segmentation daemon for dashcam and road-camera video
 roadseg watches live feeds (RTSP, USB cameras, files), segments the road in
 every frame with SegFormer, writes annotated video to disk or serves it over
 RTSP and exports Prometheus metrics. Runs on the CPU, or on an NVIDIA GPU
 when the driver is present. Ships a small default model trained on CamVid.
EOF
echo /etc/roadseg/roadseg.toml > "$root/DEBIAN/conffiles"

cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  if command -v systemd-sysusers >/dev/null 2>&1; then
    systemd-sysusers /usr/lib/sysusers.d/roadseg.conf
  elif ! getent passwd roadseg >/dev/null; then
    useradd --system --user-group --home-dir /var/lib/roadseg --shell /usr/sbin/nologin roadseg
  fi
  # The config may hold camera passwords: readable by the service only.
  if getent group roadseg >/dev/null; then
    chgrp roadseg /etc/roadseg/roadseg.toml
    chmod 0640 /etc/roadseg/roadseg.toml
  fi
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
  fi
fi
exit 0
EOF
cat > "$root/DEBIAN/prerm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
  systemctl stop roadseg.service >/dev/null 2>&1 || true
fi
exit 0
EOF
cat > "$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm" "$root/DEBIAN/postrm"

dpkg-deb --root-owner-group -Zxz --build "$root" "$out/roadseg_${version}_${arch}.deb" >/dev/null
rm -rf "$root"
ls -la "$out/roadseg_${version}_${arch}.deb"
