#!/usr/bin/env bash
# Builds a portable roadseg: one folder that runs on an x86_64 Linux machine
# with no GStreamer and no Rust (glibc >= the build machine's, see below).
#
#   tools/device-bundle.sh [OUTDIR]          # default target/device-bundle
#   OUTDIR/roadseg process clip.mp4 ...      # the launcher; any roadseg command
#
# OUTDIR/
#   roadseg                  launcher (sh): sets LD_LIBRARY_PATH, the GStreamer
#                            plugin path, scanner and a private registry, then
#                            execs bin/roadseg "$@"
#   bin/roadseg              the full binary (video + cuda features), debug info
#                            stripped
#   lib/                     every shared library the binary, the plugins, the
#                            scanner and the dlopen()ed extras need (ldd,
#                            recursively), except the glibc core (libc, libm,
#                            libpthread, libdl, librt, libresolv, ld-linux)
#   lib/gstreamer-1.0/       the plugins roadseg's pipelines use (PLUGINS below)
#   lib/gio/modules/         glib-networking's TLS module (https:// sources)
#   libexec/gst-plugin-scanner
#   bin/gst-inspect-1.0, bin/gst-launch-1.0   GStreamer's own tools, for the
#                            device calls' probes (`roadseg --bundle-exec
#                            bin/gst-launch-1.0 ...`); left out with a warning
#                            where gstreamer1.0-tools is not installed
#   share/roadseg/models/roadseg-camvid   the bundled model, only with
#                            WITH_MODEL=1 (found beside the binary as
#                            bin/../share/roadseg/models/...): a device call
#                            carries the checkout, whose models/ serves
#   MANIFEST.txt             build revision, plugins, sizes
#
# H.264 decoding: gst-libav is left out (libavcodec pulls in ~150 MB of codec
# libraries); openh264dec decodes on the CPU and nvcodec's nvh264dec/nvh265dec
# on an NVIDIA GPU (roadseg raises hardware decoders above it). libde265 is in
# for H.265 on the CPU when it is small enough. The NVIDIA (libcuda, libnvcuvid,
# libnvidia-encode) and CUDA toolkit (libcublasLt, libnvrtc) libraries are the
# target machine's own and are never bundled.
#
# Environment:
#   ROADSEG_BIN=PATH     use this binary instead of `cargo build --release`'s
#   MAX_CARRY_BYTES=N    what a device call may carry, the checkout's working
#                        tree and this folder together (default 60 MiB,
#                        tools/carry-size.sh): the script fails when they are
#                        bigger. MAX_BYTES=N caps the folder alone instead.
#   WITH_MODEL=1         put the bundled model in (default: left out)
#   FULL=1               add the camera-side plugins (http(s), V4L2, VA-API,
#                        MJPEG) and their libraries (~15 MB more)
#   GST_PLUGINS_DIR, GST_SCANNER   where the system's plugins and scanner are
set -euo pipefail
shopt -s nullglob # an empty folder (lib/gio/modules without FULL=1) globs to nothing
cd "$(dirname "$0")/.."

out=${1:-target/device-bundle}
# The call carries the checkout's working tree too: the bundle gets the rest.
tree_bytes=$(tools/carry-size.sh --tree)
max_bytes=${MAX_BYTES:-$((${MAX_CARRY_BYTES:-$((60 * 1024 * 1024))} - tree_bytes))}
plugdir=${GST_PLUGINS_DIR:-/usr/lib/x86_64-linux-gnu/gstreamer-1.0}
scanner=${GST_SCANNER:-/usr/lib/x86_64-linux-gnu/gstreamer1.0/gstreamer-1.0/gst-plugin-scanner}
model=models/roadseg-camvid

# Plugins (libgstNAME.so) and what roadseg needs them for. Required ones fail the
# script when missing; optional ones are left out with a warning.
required=(
  coreelements      # queue, tee, fakesink, filesink, capsfilter, typefind (elements)
  typefindfunctions # typefinders for uridecodebin/decodebin
  playback          # uridecodebin, decodebin
  app               # appsrc, appsink
  videoconvertscale # videoconvert, videoscale
  videotestsrc      # test:// sources, the encoder probe
  isomp4            # qtdemux, mp4mux
  multifile         # splitmuxsink (segmented recordings)
  videoparsersbad   # h264parse, h265parse
  x264              # x264enc
  openh264          # openh264enc, openh264dec (the CPU H.264 decoder)
  rtsp              # rtspsrc
  rtp               # rtph264pay/depay, rtph265depay (RTSP in and out)
  rtpmanager        # rtpbin, rtpjitterbuffer
  udp               # udpsrc/udpsink (RTP over UDP)
  tcp               # tcp elements used by the RTSP server/client
)
optional=(
  mpegtsdemux       # tsdemux: MPEG-TS files
  matroska          # matroskademux: .mkv files
  nvcodec           # nvh264dec, nvh265dec, nvh264enc: loads libcuda/libnvcuvid at run time
  de265             # libde265dec: H.265 on the CPU
)
# Camera-side extras, only with FULL=1: the GPU check reads files and test
# sources, and these pull in ~15 MB of libraries (TLS, Kerberos, SQLite, X11)
# that would not leave the working tree room in a device call.
extras=(
  soup              # souphttpsrc: http(s):// sources (libsoup-3.0 is dlopen()ed)
  va                # vah264dec, vah264enc (VA-API: Intel/AMD)
  video4linux2      # v4l2src (v4l2:// cameras)
  jpeg              # jpegdec: MJPEG from USB cameras
)
dlopened_libs=()
gio_modules=()
if [ "${FULL:-0}" = 1 ]; then
  optional+=("${extras[@]}")
  # Loaded with dlopen(), which ldd does not see: libsoup (the soup plugin
  # picks 3.0 when present) and glib-networking's TLS module for https.
  dlopened_libs=(/usr/lib/x86_64-linux-gnu/libsoup-3.0.so.0)
  gio_modules=(/usr/lib/x86_64-linux-gnu/gio/modules/libgiognutls.so)
fi

# The glibc core: every Linux machine has its own, and it must match its loader.
is_glibc_core() {
  case "$1" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libresolv.so.*) return 0 ;;
  esac
  return 1
}

# ---------------------------------------------------------------- the binary
if [ -n "${ROADSEG_BIN:-}" ]; then
  bin=$ROADSEG_BIN
else
  cargo build --release
  bin=target/release/roadseg
fi
[ -x "$bin" ] || { echo "error: $bin is not an executable" >&2; exit 1; }
# The bundle must have the video feature: the engine-only build links no GStreamer.
# ldd's output is captured first: `ldd | grep -q` under pipefail fails at random
# when grep exits before ldd has finished writing (SIGPIPE), as it did in CI.
linked=$(ldd "$bin")
grep -q 'libgstreamer-1.0' <<<"$linked" || {
  echo "error: $bin is not linked against GStreamer (built without the video feature?)" >&2
  exit 1
}
[ -x "$scanner" ] || { echo "error: $scanner not found (apt install libgstreamer1.0-0)" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/gstreamer-1.0" "$out/lib/gio/modules" "$out/libexec"
out=$(cd "$out" && pwd)
cp "$bin" "$out/bin/roadseg"
strip --strip-debug "$out/bin/roadseg"
cp "$scanner" "$out/libexec/gst-plugin-scanner"
tools=()
for t in gst-inspect-1.0 gst-launch-1.0; do
  if p=$(command -v "$t"); then
    cp "$p" "$out/bin/$t"
    tools+=("$out/bin/$t")
  else
    echo "warning: $t not found (apt install gstreamer1.0-tools): left out of the bundle" >&2
  fi
done

plugins=()
for p in "${required[@]}"; do
  f=$plugdir/libgst$p.so
  [ -f "$f" ] || { echo "error: required plugin $f not found (tools/install-deps.sh)" >&2; exit 1; }
  plugins+=("$p")
done
for p in "${optional[@]}"; do
  f=$plugdir/libgst$p.so
  if [ -f "$f" ]; then plugins+=("$p"); else echo "warning: optional plugin $f not found: left out" >&2; fi
done
for p in "${plugins[@]}"; do cp "$plugdir/libgst$p.so" "$out/lib/gstreamer-1.0/"; done
for m in "${gio_modules[@]}"; do
  if [ -f "$m" ]; then cp "$m" "$out/lib/gio/modules/"; else echo "warning: $m not found: no https" >&2; fi
done
for l in "${dlopened_libs[@]}"; do
  if [ -f "$l" ]; then cp -L "$l" "$out/lib/$(basename "$l")"; else echo "warning: $l not found: left out" >&2; fi
done

# ---------------------------------------------------------------- libraries
# ldd lists a file's whole dependency closure (the loader resolves it
# recursively); the loop also runs ldd on every library it copies, so nothing
# reached only through a dlopen()ed library is missed.
declare -A seen=()
missing=()
compat_libs=()
queue=("$out/bin/roadseg" "${tools[@]}" "$out/libexec/gst-plugin-scanner" "$out"/lib/gstreamer-1.0/*.so "$out"/lib/gio/modules/*.so)
for l in "${dlopened_libs[@]}"; do [ -f "$out/lib/$(basename "$l")" ] && queue+=("$out/lib/$(basename "$l")"); done
while [ ${#queue[@]} -gt 0 ]; do
  file=${queue[0]}
  queue=("${queue[@]:1}")
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    is_glibc_core "$name" && continue
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    if [ "$path" = "not" ]; then
      missing+=("$name (needed by $(basename "$file"))")
      continue
    fi
    [ -f "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
    queue+=("$out/lib/$name")
  done < <(env -u LD_LIBRARY_PATH ldd "$file" 2>/dev/null || true)
done
if [ ${#missing[@]} -gt 0 ]; then
  printf 'error: library not found: %s\n' "${missing[@]}" >&2
  exit 1
fi

# glibc: the target needs one at least as new as the newest symbol version any
# bundled file asks for. A few common libraries built here (libstdc++,
# libgcc_s, libexpat) ask for a newer one than all the rest; they go into
# lib/glibc-X.Y/, which the launcher uses only on a glibc >= X.Y and otherwise
# leaves to the target's own copies (every distribution has them, and they are
# backward compatible), so the bundle also runs on an older glibc.
glibc_of() { objdump -T "$1" 2>/dev/null | { grep -o 'GLIBC_[0-9][0-9.]*' || true; } | sed 's/GLIBC_//' | sort -u -V | tail -1; }
host_replaceable=(libstdc++.so.6 libgcc_s.so.1 libexpat.so.1)
floor=0
for f in "$out"/bin/* "$out/libexec/gst-plugin-scanner" "$out"/lib/*.so* "$out"/lib/gstreamer-1.0/*.so "$out"/lib/gio/modules/*.so; do
  case " ${host_replaceable[*]} " in *" $(basename "$f") "*) continue ;; esac
  v=$(glibc_of "$f")
  if [ -n "$v" ]; then floor=$(printf '%s\n%s\n' "$floor" "$v" | sort -V | tail -1); fi
done
compat_glibc=$floor
for l in "${host_replaceable[@]}"; do
  [ -f "$out/lib/$l" ] || continue
  v=$(glibc_of "$out/lib/$l")
  if [ -n "$v" ] && [ "$(printf '%s\n%s\n' "$floor" "$v" | sort -V | tail -1)" != "$floor" ]; then
    compat_glibc=$(printf '%s\n%s\n' "$compat_glibc" "$v" | sort -V | tail -1)
    compat_libs+=("$l")
  fi
done
if [ ${#compat_libs[@]} -gt 0 ]; then
  mkdir -p "$out/lib/glibc-$compat_glibc"
  for l in "${compat_libs[@]}"; do mv "$out/lib/$l" "$out/lib/glibc-$compat_glibc/"; done
fi

# ---------------------------------------------------------------- the model
if [ "${WITH_MODEL:-0}" = 1 ] && [ -f "$model/config.json" ]; then
  mkdir -p "$out/share/roadseg/models"
  cp -r "$model" "$out/share/roadseg/models/"
fi

# ---------------------------------------------------------------- the launcher
cat >"$out/roadseg" <<'EOF'
#!/bin/sh
# roadseg from a portable bundle: this folder's GStreamer, plugins and
# libraries, never the system's. Written by tools/device-bundle.sh.
#   roadseg ARGS...                       bin/roadseg ARGS... in that environment
#   roadseg --bundle-exec PROGRAM ARGS... another program in it (gst-inspect-1.0,
#                                         ldd, a shell), for debugging
# The helpers below (readlink, getconf, sort, cksum, mkdir) run before
# LD_LIBRARY_PATH is set, so they use the system's libraries, not the bundle's.
self=$0
if [ -L "$self" ]; then self=$(readlink -f "$self"); fi
case "$self" in */*) here=${self%/*} ;; *) here=. ;; esac
here=$(cd "$here" && pwd -P) || exit 1

# lib/glibc-X.Y/ holds copies of libstdc++ & co. that need glibc >= X.Y; an
# older glibc uses the system's own copies instead.
libs="$here/lib"
for d in "$here"/lib/glibc-*; do
  [ -d "$d" ] || continue
  need=${d##*/glibc-}
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null); have=${have##* }
  if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)" = "$need" ]; then
    libs="$libs:$d"
  fi
done

# The registry (GStreamer's cache of what each plugin holds) goes somewhere
# writable, since the bundle may be read-only: one file per bundle folder.
if [ -z "${GST_REGISTRY_1_0:-}" ]; then
  key=$(printf '%s' "$here" | cksum | cut -d' ' -f1)
  cache=${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}
  if [ -n "$cache" ] && mkdir -p "$cache/roadseg" 2>/dev/null && [ -w "$cache/roadseg" ]; then
    GST_REGISTRY_1_0="$cache/roadseg/gst-registry-$key.bin"
  else
    dir=${TMPDIR:-/tmp}/roadseg-$(id -u)
    mkdir -p "$dir" && chmod 700 "$dir" || exit 1
    GST_REGISTRY_1_0="$dir/gst-registry-$key.bin"
  fi
fi

LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
GST_PLUGIN_SYSTEM_PATH_1_0="$here/lib/gstreamer-1.0"
GST_PLUGIN_PATH_1_0="$here/lib/gstreamer-1.0"
GST_PLUGIN_SCANNER_1_0="$here/libexec/gst-plugin-scanner"
GIO_MODULE_DIR="$here/lib/gio/modules"
export LD_LIBRARY_PATH GST_REGISTRY_1_0 GST_PLUGIN_SYSTEM_PATH_1_0 GST_PLUGIN_PATH_1_0 GST_PLUGIN_SCANNER_1_0 GIO_MODULE_DIR
unset GST_PLUGIN_PATH GST_PLUGIN_SYSTEM_PATH GST_PLUGIN_SCANNER GIO_EXTRA_MODULES

if [ "${1:-}" = "--bundle-exec" ]; then
  shift
  exec "$@"
fi
exec "$here/bin/roadseg" "$@"
EOF
chmod 755 "$out/roadseg"

# ---------------------------------------------------------------- check + table
# A smoke test in a clean environment: two frames encoded and muxed by the
# bundle's own GStreamer (the plugins load with the bundle's libraries only).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! check=$(env -i PATH=/usr/bin:/bin HOME="$tmp" timeout 120 "$out/roadseg" synth -o "$tmp/check.mp4" \
  --frames 2 --size 64x64 2>&1) || [ ! -s "$tmp/check.mp4" ]; then
  echo "error: the bundled roadseg failed its smoke test (synth): $check" >&2
  exit 1
fi

# With a GStreamer install here, also: no bundled plugin is blacklisted (each
# loads with the bundle's libraries) and every element roadseg uses is there.
elements=(uridecodebin decodebin typefind queue fakesink filesink capsfilter appsrc appsink videoconvert
  videoscale videotestsrc qtdemux mp4mux splitmuxsink h264parse h265parse x264enc openh264enc openh264dec
  rtspsrc rtph264pay rtph264depay rtpbin udpsrc tcpserversink tsdemux matroskademux)
[ "${FULL:-0}" = 1 ] && elements+=(souphttpsrc v4l2src jpegdec)
if command -v gst-inspect-1.0 >/dev/null; then
  inspect() { env -i PATH=/usr/bin:/bin HOME="$tmp" "$out/roadseg" --bundle-exec gst-inspect-1.0 "$@"; }
  blacklisted=$(inspect -b 2>&1 | grep -v -e '^Blacklisted files:' -e '^Total count' -e '^$' || true)
  if [ -n "$blacklisted" ]; then
    echo "error: bundled plugins that do not load: $blacklisted" >&2
    exit 1
  fi
  absent=()
  for e in "${elements[@]}"; do inspect --exists "$e" || absent+=("$e"); done
  if [ ${#absent[@]} -gt 0 ]; then
    echo "error: elements missing from the bundle: ${absent[*]}" >&2
    exit 1
  fi
  decoders=$(inspect 2>/dev/null | grep -iE ':  *[a-z0-9]*(h26[45]|de265)[a-z0-9]*dec:' | awk -F: '{gsub(/ /, "", $2); print $2}' | tr '\n' ' ')
else
  echo "warning: gst-inspect-1.0 not found: plugin load check skipped" >&2
  decoders="(not checked)"
fi

bytes() { du -sb "$@" | awk '{ s += $1 } END { print s + 0 }'; }
{
  echo "roadseg portable bundle"
  echo "rev $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)')"
  # shellcheck disable=SC1091
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), GStreamer $(pkg-config --modversion gstreamer-1.0 2>/dev/null || echo '?')"
  echo "needs glibc >= $floor on the target${compat_libs:+ (below glibc $compat_glibc the system copies of ${compat_libs[*]})}"
  echo "plugins: ${plugins[*]}"
  echo "H.264/H.265 decoders registered here: $decoders(nvh264dec/nvh265dec register only where an NVIDIA GPU is, vah264dec where VA-API is)"
  echo
  printf '%-46s %12s\n' "part" "bytes"
  printf '%-46s %12s\n' "bin/ (roadseg, debug info stripped; gst tools)" "$(bytes "$out/bin")"
  printf '%-46s %12s\n' "libexec/gst-plugin-scanner" "$(bytes "$out/libexec")"
  printf '%-46s %12s\n' "lib/gstreamer-1.0 (${#plugins[@]} plugins)" "$(bytes "$out/lib/gstreamer-1.0")"
  printf '%-46s %12s\n' "lib/gio/modules (TLS for https)" "$(bytes "$out/lib/gio")"
  printf '%-46s %12s\n' "lib/*.so* ($(find "$out/lib" -maxdepth 2 -name '*.so*' -path "$out/lib/*" ! -path '*/gstreamer-1.0/*' ! -path '*/gio/*' | wc -l) shared libraries)" \
    "$(bytes "$out"/lib/*.so* "$out"/lib/glibc-* 2>/dev/null)"
  [ -d "$out/share" ] && printf '%-46s %12s\n' "share/ (model)" "$(bytes "$out/share")"
  printf '%-46s %12s\n' "launcher" "$(bytes "$out/roadseg")"
  printf '%-46s %12s\n' "total (with this file)" "@TOTAL@"
  printf '%-46s %12s\n' "limit (carry limit less the working tree's $tree_bytes)" "$max_bytes"
  echo
  echo "largest libraries:"
  find "$out/lib" -maxdepth 2 -name '*.so*' ! -path '*/gstreamer-1.0/*' -printf '%s %P\n' | sort -rn | sed -n 1,12p |
    while read -r n f; do printf '  %-44s %12s\n' "$f" "$n"; done
  echo
  echo "plugins:"
  for p in "${plugins[@]}"; do printf '  %-44s %12s\n' "libgst$p.so" "$(stat -c %s "$out/lib/gstreamer-1.0/libgst$p.so")"; done
} >"$out/MANIFEST.txt"
total=$(bytes "$out")
sed -i "s/@TOTAL@/$(printf '%7s' "$total")/" "$out/MANIFEST.txt"
total=$(bytes "$out")
cat "$out/MANIFEST.txt"

if [ "$total" -gt "$max_bytes" ]; then
  echo "error: the bundle is $total bytes, over the $max_bytes limit (MAX_BYTES)" >&2
  exit 1
fi
echo "bundle: $out, $total bytes (limit $max_bytes)"
