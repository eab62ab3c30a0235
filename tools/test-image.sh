#!/usr/bin/env bash
# CI check of the container image (tools/build-image.sh), run for real under
# podman on this machine:
#   1. build the image (from an existing .deb with DEB=..., else tools/build-deb.sh)
#   2. run it: a config with two CPU streams (a live test:// pattern and a looped
#      H.264 High-profile MP4, decoded by openh264 since the image has no gst-libav),
#      each recorded in 4 s segments to a host folder mounted at the recordings
#      path, RTSP served; ports published on 127.0.0.1 only
#   3. scrape /metrics and /api/v1/streams from the host (Basic auth): both
#      streams up and frames moving; read a few frames over RTSP
#   4. podman stop (SIGTERM, 30 s): exit code 0, every segment plays (ffprobe)
#   5. the image: under 250 MB, runs as non-root, HEALTHCHECK healthy
# Installs podman, runc, mmdebstrap (and curl, ffmpeg) when missing. Needs root.
# Cleans up the containers, volumes and images it made; exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
step() { echo; echo "== test-image [$(( $(date +%s) - started )) s] $*"; }
fail() { echo "test-image: FAIL: $*" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | sed -n 1p)
# The name build-image.sh gives it; removed from podman's store at the end (the
# archives stay in target/image).
image=localhost/roadseg:$version
name=roadseg-test-$$
max_mb=${MAX_MB:-250}
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

step "0. tools"
need=()
for t in podman:podman runc:runc mmdebstrap:mmdebstrap curl:curl ffprobe:ffmpeg python3:python3; do
  command -v "${t%%:*}" >/dev/null || [ -x "/usr/sbin/${t%%:*}" ] || need+=("${t#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
podman --version
work=$(mktemp -d /tmp/roadseg-image-test.XXXXXX)
export CONTAINERS_CONF=$work/containers.conf
printf '[containers]\ndefault_ulimits = []\n' > "$CONTAINERS_CONF"
pod=(podman --runtime /usr/sbin/runc)

cleanup() {
  rc=$?
  set +e
  if [ "$rc" != 0 ] && "${pod[@]}" container exists "$name" 2>/dev/null; then
    echo "test-image: the container's log (last 60 lines):" >&2
    "${pod[@]}" logs "$name" 2>&1 | tail -n 60 >&2
  fi
  "${pod[@]}" rm -f -v -t 0 "$name" >/dev/null 2>&1
  "${pod[@]}" rmi -f "$image" >/dev/null 2>&1
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

step "1. build the image"
IMAGE=$image ./tools/build-image.sh
# One-off runs below use --no-healthcheck: podman schedules a HEALTHCHECK with a
# systemd timer, and without systemd here it logs "unable to get systemd
# connection" for the long-running container (harmless; step 5a runs the check).

step "2. run it"
uid=$("${pod[@]}" run --rm --no-healthcheck --network=none --entrypoint /usr/bin/id "$image" -u)
user=$("${pod[@]}" run --rm --no-healthcheck --network=none --entrypoint /usr/bin/id "$image" -un)
echo "the image runs as $user (uid $uid)"
[ "$uid" != 0 ] || fail "the image runs as root"
[ "$user" = roadseg ] || fail "the image runs as $user, not roadseg"
# Hub models are cached under $HF_HOME, which the roadseg user must be able to write.
hf=$("${pod[@]}" run --rm --no-healthcheck --network=none --entrypoint /bin/sh "$image" -c \
  'mkdir -p "$HF_HOME/hub" && touch "$HF_HOME/hub/.w" && echo "$HF_HOME"') || fail "the Hugging Face cache (HF_HOME) is not writable by roadseg"
echo "Hugging Face cache: $hf (writable)"
[ "$hf" = /var/cache/roadseg/huggingface ] || fail "HF_HOME is '$hf', not /var/cache/roadseg/huggingface"
# H.264 from the clip below can only be decoded by openh264 here: no gst-libav.
plugins=$("${pod[@]}" run --rm --no-healthcheck --network=none --entrypoint /bin/sh "$image" -c \
  'ls /usr/lib/*-linux-gnu/gstreamer-1.0 | sed "s/^libgst//; s/[.]so$//" | tr "\n" " "')
echo "GStreamer plugins in the image: $plugins"
case " $plugins " in *" libav "*) fail "gst-libav is in the trimmed image" ;; esac
case " $plugins " in *" openh264 "*) ;; *) fail "openh264 is not in the image" ;; esac

# The image's own /etc/roadseg/roadseg.toml listens on 0.0.0.0: refused (exit 78,
# EX_CONFIG) without credentials, accepted with them from the environment.
set +e
"${pod[@]}" run --rm --no-healthcheck --network=none "$image" check-config /etc/roadseg/roadseg.toml > "$work/default.txt" 2>&1
rc=$?
set -e
cat "$work/default.txt"
[ "$rc" = 78 ] || fail "the image's default config without credentials: exit $rc, not 78"
"${pod[@]}" run --rm --no-healthcheck --network=none -e ROADSEG__RTSP__USERNAME=viewer -e ROADSEG__RTSP__PASSWORD=change-me \
  "$image" check-config /etc/roadseg/roadseg.toml
echo "the image's default config: exit 78 without credentials, accepted with ROADSEG__RTSP__USERNAME/PASSWORD"

mkdir -p "$work/etc" "$work/recordings"
# A 6 s 320x240 H.264 High-profile clip, looped by the daemon as a second camera.
ffmpeg -loglevel error -f lavfi -i testsrc2=size=320x240:rate=10 -t 6 -c:v libx264 -profile:v high -pix_fmt yuv420p \
  -g 10 "$work/etc/clip.mp4"
ffprobe -v error -select_streams v:0 -show_entries stream=codec_name,profile -of csv=p=0 "$work/etc/clip.mp4"
read -r mport rport < <(python3 -c '
import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
password=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
cat > "$work/etc/roadseg.toml" <<TOML
[model]
path = "/usr/share/roadseg/models/roadseg-camvid"
width = 320
height = 192
device = "cpu"

[metrics]
listen = "0.0.0.0:9464"

[rtsp]
listen = "0.0.0.0:8554"
username = "ci"
password = "$password"

[daemon]
shutdown_timeout_s = 20
min_free_bytes = 0

[[streams]]
name = "cam"
uri = "test://smpte?width=320&height=240&fps=10"
live = true
[streams.output]
file = "/var/lib/roadseg/recordings/{stream}-{start}.mp4"
segment_seconds = 4
bitrate_kbps = 500
rtsp = "{stream}"
stats = "/var/lib/roadseg/recordings/{stream}.jsonl"

[[streams]]
name = "clip"
uri = "file:///etc/roadseg/clip.mp4"
loop = true
[streams.output]
file = "/var/lib/roadseg/recordings/{stream}-{start}.mp4"
segment_seconds = 4
bitrate_kbps = 500
TOML
chmod 0755 "$work/etc"
chmod 0644 "$work/etc"/*
chown "$uid" "$work/recordings"
"${pod[@]}" run --rm --no-healthcheck --network=none -v "$work/etc:/etc/roadseg:ro" "$image" check-config /etc/roadseg/roadseg.toml
# Hardened as deploy/kubernetes runs it: read-only root (podman puts tmpfs on
# /tmp, /run, /var/tmp), no capabilities, no privilege escalation.
"${pod[@]}" run -d --name "$name" --read-only --cap-drop=all --security-opt=no-new-privileges \
  -p "127.0.0.1:$mport:9464" -p "127.0.0.1:$rport:8554" \
  -v "$work/etc:/etc/roadseg:ro" -v "$work/recordings:/var/lib/roadseg/recordings" \
  "$image"
"${pod[@]}" ps --filter "name=$name" --format '{{.Names}} {{.Status}} {{.Ports}}'

step "3. scrape 127.0.0.1:$mport from the host"
base=http://127.0.0.1:$mport
ok=0
for _ in $(seq 1 60); do
  if curl -fsS -o /dev/null --max-time 2 "$base/healthz" 2>/dev/null; then ok=1; break; fi
  "${pod[@]}" container exists "$name" && [ "$("${pod[@]}" inspect -f '{{.State.Running}}' "$name")" = true ] ||
    fail "the container exited: $("${pod[@]}" inspect -f '{{.State.ExitCode}}' "$name")"
  sleep 1
done
[ "$ok" = 1 ] || fail "/healthz did not answer within 60 s"
echo "/healthz: 200 (no credentials)"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$base/metrics")
echo "/metrics without credentials: $code"
[ "$code" = 401 ] || fail "/metrics without credentials answered $code, not 401"
auth=(-u "ci:$password")
streams_up() {
  curl -fsS --max-time 5 "${auth[@]}" "$base/api/v1/streams" > "$work/streams.json" &&
    python3 - "$work/streams.json" "$@" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
streams = doc["streams"] if isinstance(doc, dict) else doc
by = {s["name"]: s for s in streams}
min_frames = int(sys.argv[2])
for n in ("cam", "clip"):
    s = by.get(n)
    if s is None:
        print(f"no stream {n}"); sys.exit(1)
    print(f"{n}: state={s['state']} frames_decoded={s['frames_decoded']} frames_inferred={s['frames_inferred']} "
          f"frames_out={s['frames_out']} fps_out={s['fps_out']} road_coverage={s.get('road_coverage')}")
    if s["state"] != "up" or s["frames_out"] < min_frames:
        sys.exit(1)
PY
}
ok=0
for _ in $(seq 1 90); do
  if streams_up 30 > "$work/up.txt" 2>&1; then ok=1; break; fi
  sleep 1
done
cat "$work/up.txt"
[ "$ok" = 1 ] || fail "the streams were not up with 30 frames out within 90 s"
first=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d["streams"] if isinstance(d,dict) else d; print(sum(s["frames_out"] for s in d))' "$work/streams.json")
sleep 5
streams_up 30
second=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d=d["streams"] if isinstance(d,dict) else d; print(sum(s["frames_out"] for s in d))' "$work/streams.json")
echo "frames out, both streams: $first, 5 s later $second"
[ "$second" -gt "$first" ] || fail "no frames moved in 5 s"
curl -fsS --max-time 5 "${auth[@]}" "$base/metrics" > "$work/metrics.txt"
grep -E '^roadseg_frames_(decoded|inferred|written)_total\{' "$work/metrics.txt" | head -n 8 || true
for s in cam clip; do
  grep -qE "^roadseg_frames_[a-z]+_total\{[^}]*stream=\"$s\"[^}]*\} [1-9]" "$work/metrics.txt" ||
    fail "/metrics has no nonzero frame counter for stream $s"
done
echo "/metrics: $(wc -l < "$work/metrics.txt") lines, nonzero frame counters for cam and clip"
rtsp_frames=$(timeout 30 ffprobe -v error -rtsp_transport tcp -select_streams v:0 -count_frames -read_intervals '%+#10' \
  -show_entries stream=codec_name,width,height,nb_read_frames -of csv=p=0 "rtsp://ci:$password@127.0.0.1:$rport/cam") ||
  fail "RTSP: ffprobe of rtsp://127.0.0.1:$rport/cam failed"
echo "RTSP rtsp://127.0.0.1:$rport/cam: codec,width,height,frames read = $rtsp_frames"

step "5a. HEALTHCHECK"
"${pod[@]}" image inspect --format 'HEALTHCHECK {{.Config.Healthcheck.Test}}' "$image"
"${pod[@]}" healthcheck run "$name" && echo "podman healthcheck run: healthy" || fail "podman healthcheck run: unhealthy"
"${pod[@]}" inspect --format 'health status: {{.State.Health.Status}}' "$name" || true
echo "the daemon runs as: $("${pod[@]}" top "$name" user pid comm | tail -n +2 | head -n 3 | tr '\n' ';')"
procs=$("${pod[@]}" top "$name" user | tail -n +2)
[ -n "$procs" ] || fail "podman top shows no process"
! echo "$procs" | grep -q '^root' || fail "a process in the container runs as root"

step "4. podman stop (SIGTERM, 30 s)"
t0=$(date +%s)
"${pod[@]}" stop -t 30 "$name" >/dev/null
exit_code=$("${pod[@]}" inspect -f '{{.State.ExitCode}}' "$name")
echo "stopped in $(( $(date +%s) - t0 )) s, exit code $exit_code"
"${pod[@]}" logs "$name" 2>&1 | tail -n 5
[ "$exit_code" = 0 ] || fail "exit code $exit_code after SIGTERM"
segments=0
frames_total=0
for f in "$work"/recordings/*.mp4; do
  [ -e "$f" ] || continue
  frames=$(ffprobe -v error -select_streams v:0 -count_frames -show_entries stream=nb_read_frames -of csv=p=0 "$f") ||
    fail "$(basename "$f") does not play"
  frames=${frames%%,*}
  echo "$(basename "$f"): $(stat -c %s "$f") bytes, $frames frames"
  [ "${frames:-0}" -gt 0 ] 2>/dev/null || fail "$(basename "$f") has no frames"
  segments=$((segments + 1)); frames_total=$((frames_total + frames))
done
for s in cam clip; do ls "$work/recordings/$s-"*.mp4 >/dev/null 2>&1 || fail "no recording of stream $s"; done
echo "segments checked: $segments, all play, $frames_total frames in all"

step "5b. size"
size=$("${pod[@]}" image inspect --format '{{.Size}}' "$image")
echo "image size: $((size / 1000000)) MB ($size bytes), limit $max_mb MB"
[ "$size" -lt $((max_mb * 1000000)) ] || fail "the image is $((size / 1000000)) MB, over $max_mb MB"
oci=target/image/roadseg-$version.oci.tar
docker_tar=target/image/roadseg-$version.docker.tar
echo "archives: $oci $(du -m "$oci" | cut -f1) MB, $docker_tar $(du -m "$docker_tar" | cut -f1) MB"
# Each archive loads into an empty store; the OCI image config has no HEALTHCHECK
# field, so only the docker-archive keeps it.
for a in "oci-archive:$oci" "docker-archive:$docker_tar"; do
  store=(podman --root "$work/store/root" --runroot "$work/store/run")
  loaded=$("${store[@]}" load -q -i "${a#*:}" | sed -n 's/^Loaded image[^:]*: //p' | head -n 1)
  hc=$("${store[@]}" image inspect --format '{{.Config.Healthcheck}}' "$loaded")
  echo "${a%%:*}: loads as $loaded, user $("${store[@]}" image inspect --format '{{.Config.User}}' "$loaded"), HEALTHCHECK ${hc}"
  if [ "${a%%:*}" = docker-archive ]; then
    case "$hc" in *healthz*) ;; *) fail "the docker-archive lost the HEALTHCHECK" ;; esac
  fi
  "${store[@]}" rmi -a -f >/dev/null
  rm -rf "$work/store"
done

echo
echo "test-image: passed in $(( $(date +%s) - started )) s: $image ($((size / 1000000)) MB) runs as $user, streams up, $segments segments play, SIGTERM exit 0, healthcheck healthy"
