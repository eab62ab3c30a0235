#!/usr/bin/env python3
"""How long after a frame's decoding its live-view fragment reaches a client
(the server's and the network's part of the live delay, without a browser):

  tools/live-fragment-lag.py [http://127.0.0.1:9464] [STREAM] [SECONDS]

Reads /api/v1/streams/STREAM/live.mp4 for SECONDS (15), takes each fragment's
first sample time (moof/traf/tfdt over the mdhd timescale) from the viewer's
timeline origin (/api/v1/streams: live_view.timeline_origin_unix_ms) and
prints the median, min and max of arrival - (origin + that time). Same
machine as the daemon (one clock). docs/benchmarks.md, "Live view".
"""
import sys
BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:9464"
STREAM = sys.argv[2] if len(sys.argv) > 2 else None
SECONDS = float(sys.argv[3]) if len(sys.argv) > 3 else 15.0
import json, struct, time, urllib.request
streams = json.load(urllib.request.urlopen(BASE + "/api/v1/streams"))["streams"]
index = next(i for i, s in enumerate(streams) if STREAM in (None, s["name"]))
name = streams[index]["name"]
r = urllib.request.urlopen(f"{BASE}/api/v1/streams/{name}/live.mp4")
buf = b""; t0 = time.time(); origin = None; lags = []; timescale = None
def boxes(data):
    i = 0
    while i + 8 <= len(data):
        size, typ = struct.unpack(">I4s", data[i:i+8])
        if size < 8 or i + size > len(data): break
        yield typ.decode(), data[i+8:i+size]; i += size
while time.time() - t0 < SECONDS:
    chunk = r.read1(65536)
    now = time.time()
    buf += chunk
    while len(buf) >= 8:
        size, typ = struct.unpack(">I4s", buf[:8])
        if len(buf) < size: break
        body = buf[8:size]; buf = buf[size:]
        if typ == b"moov":
            for t, b in boxes(body):
                if t == "trak":
                    for t2, b2 in boxes(b):
                        if t2 == "mdia":
                            for t3, b3 in boxes(b2):
                                if t3 == "mdhd":
                                    v = b3[0]; timescale = struct.unpack(">I", b3[12:16] if v == 0 else b3[20:24])[0]
        if typ == b"moof":
            for t, b in boxes(body):
                if t == "traf":
                    for t2, b2 in boxes(b):
                        if t2 == "tfdt":
                            v = b2[0]; dt = struct.unpack(">Q", b2[4:12])[0] if v == 1 else struct.unpack(">I", b2[4:8])[0]
                            if origin is None:
                                api = json.load(urllib.request.urlopen(BASE + "/api/v1/streams"))
                                origin = api["streams"][index]["live_view"]["timeline_origin_unix_ms"]
                            if origin and timescale:
                                lags.append(now * 1000 - (origin + 1000 * dt / timescale))
lags.sort()
print(f"{name}: timescale {timescale}, {len(lags)} fragments; decode to fragment start arriving: median {lags[len(lags)//2]:.0f} ms, min {lags[0]:.0f}, max {lags[-1]:.0f}")
