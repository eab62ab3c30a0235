#!/bin/sh
# Runs inside the image's root (chroot, from tools/build-image.sh) after the
# roadseg .deb is installed with all its Depends. It keeps the GStreamer
# plugins roadseg's pipelines and sources use (the list below, the same choice
# as tools/device-bundle.sh plus the camera-side ones) and deletes the others,
# then purges every package that is neither part of Debian's minimal system
# (Priority required/important, Essential) nor owns a file that roadseg, the
# plugin scanner, the kept plugins, curl (the HEALTHCHECK) or the dlopen()ed
# libraries below need (their ldd closure). The big one left out is
# gst-libav (FFmpeg: ~230 MB with its codec libraries); H.264 is decoded by
# openh264dec on the CPU, H.265 by libde265dec, or by nvcodec/VA on a GPU.
# Packages are purged with --force-depends: dpkg still lists roadseg's full
# Depends, so do not apt-get inside the image (derive one with FULL=1 instead).
set -eu
libdir=$(ls -d /usr/lib/*-linux-gnu | head -n 1)
plugdir=$libdir/gstreamer-1.0
scanner=$libdir/gstreamer1.0/gstreamer-1.0/gst-plugin-scanner

# Plugins (libgstNAME.so). Required ones fail the build when missing.
required="coreelements typefindfunctions playback app videoconvertscale videotestsrc
  isomp4 multifile videoparsersbad x264 openh264 rtsp rtp rtpmanager udp tcp"
# Sources and decoders: files (MPEG-TS, Matroska), H.265 on the CPU, NVIDIA
# (NVDEC/NVENC, libraries from the host), VA-API (driver not included),
# http(s) (libsoup, HLS, MJPEG), V4L2 cameras, JPEG.
optional="mpegtsdemux matroska de265 nvcodec va soup hls multipart video4linux2 jpeg"
# One line, space-separated, for the match below.
# shellcheck disable=SC2086,SC2116
keep=" $(echo $required $optional) "

for p in $required; do
  [ -f "$plugdir/libgst$p.so" ] || { echo "slim: required plugin libgst$p.so not installed" >&2; exit 1; }
done
removed=0
for f in "$plugdir"/libgst*.so; do
  n=${f##*/libgst}; n=${n%.so}
  case "$keep" in
    *" $n "*) ;;
    *) rm -f "$f"; removed=$((removed + 1)) ;;
  esac
done
echo "slim: kept $(ls "$plugdir" | wc -l) GStreamer plugins, deleted $removed"

# Loaded with dlopen(), which ldd does not see: libsoup (the soup plugin picks
# 3.0) and glib-networking's TLS module (rtsps://, https://).
roots="/usr/bin/roadseg /usr/bin/curl $scanner $plugdir/*.so $libdir/libsoup-3.0.so.0 $libdir/gio/modules/libgiognutls.so"
files=$(for f in $roots; do
  [ -e "$f" ] || continue
  realpath "$f"
  ldd "$f" | awk '/=>/ && $3 ~ /^\// {print $3}' | xargs -r realpath
done | sort -u)
missing=$(for f in $roots; do [ -e "$f" ] && ldd "$f" | grep "not found" || true; done)
[ -z "$missing" ] || { echo "slim: unresolved libraries: $missing" >&2; exit 1; }

needed=$( {
  # dpkg -S names the package of each file (by its path as installed: /lib is /usr/lib).
  for f in $files; do dpkg -S "$f" 2>/dev/null || dpkg -S "$(echo "$f" | sed 's|^/usr/lib/|/lib/|')" 2>/dev/null || true; done |
    cut -d: -f1 | tr ',' '\n'
  # The minimal system and what it depends on, recursively: the packages
  # Debian marks required, important, Essential or Protected, and ca-certificates
  # (https://, rtsps://).
  base=$(dpkg-query -W -f '${Package} ${Priority} ${Essential} ${Protected}\n' |
    awk '$2 == "required" || $2 == "important" || $3 == "yes" || $4 == "yes" {print $1}')
  # shellcheck disable=SC2086
  apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances $base ca-certificates | grep -v '^ ' | tr -d '<>'
  echo roadseg; echo glib-networking-common; echo libgstreamer1.0-0
} | sed 's/:.*//; s/ //g' | sort -u)
installed=$(dpkg-query -W -f '${Package}\n' | sort -u)
purge=$(echo "$installed" | grep -vxF "$needed" || true)
before=$(du -sm /usr | cut -f1)
if [ -n "$purge" ]; then
  echo "slim: purging $(echo "$purge" | wc -l) packages: $(echo "$purge" | tr '\n' ' ')"
  # shellcheck disable=SC2086
  # Its warnings (the broken Depends) go to a log, shown if it fails.
  dpkg --purge --force-depends $purge >/tmp/slim-dpkg.log 2>&1 || { cat /tmp/slim-dpkg.log >&2; exit 1; }
  rm -f /tmp/slim-dpkg.log
fi
missing=$(for f in /usr/bin/roadseg /usr/bin/curl $scanner "$plugdir"/*.so; do ldd "$f" | grep "not found" | sed "s|^|$f: |" || true; done)
[ -z "$missing" ] || { echo "slim: libraries gone after the purge: $missing" >&2; exit 1; }
echo "slim: /usr $before MB -> $(du -sm /usr | cut -f1) MB"
