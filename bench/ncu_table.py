#!/usr/bin/env python3
"""Per-kernel table of one profiled roadseg forward from Nsight Compute's raw
CSV (`ncu --import REP --csv --page raw`): kernel families and the top 30
kernels by total time, as markdown. Plain python3 (no torch).

  bench/ncu_table.py CSV CLOCK_CONTROL LABEL > table.md
"""
import collections, csv, re, sys
path, clock, label = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [r for r in csv.reader(open(path, newline="")) if r]
hi = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if hi is None:
    sys.exit(f"{path}: no 'Kernel Name' column")
hdr, data = rows[hi], rows[hi + 1:]
k = hdr.index("Kernel Name")
t = next(i for i, h in enumerate(hdr) if h.startswith("gpu__time_duration"))
to_us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
scale = 1e-3  # ncu's base unit for durations is ns
m = re.search(r"\[(\w+)\]", hdr[t])
if m:
    scale = to_us.get(m.group(1), scale)
if data and data[0][k] == "":  # the units row
    scale = to_us.get(data[0][t].strip(), scale)
    data = data[1:]
kernels = []  # (name, us) in launch order
for r in data:
    try:
        kernels.append((re.sub(r"\(.*$", "", r[k]).strip() or "?", float(r[t].replace(",", "")) * scale))
    except (ValueError, IndexError):
        continue
# The frame starts with the preprocess kernel; anything before it ran while
# the model loaded (weight conversion), not in the forward.
first = next((i for i, (n, _) in enumerate(kernels) if n.startswith("preprocess")), None)
dropped = kernels[:first] if first else []
if first:
    kernels = kernels[first:]
calls, total = collections.Counter(), collections.Counter()
for name, v in kernels:
    calls[name] += 1
    total[name] += v
def family(n):
    if re.match(r"(nvjet|sm\d+_|cutlass|ampere_|hopper_|gemm|xmma|cublas)", n, re.I):
        return "cuBLASLt GEMM kernels"
    return re.sub(r"_(f16|bf16|f32|half|bfloat16|float)$", "", n)
fam_calls, fam_total = collections.Counter(), collections.Counter()
for n in total:
    fam_calls[family(n)] += calls[n]
    fam_total[family(n)] += total[n]
s = sum(total.values())
print(f"B5 1024x1024, {label}: one roadseg forward (roadseg bench --frames 1 --warmup 0 --no-graph) under ncu "
      f"--clock-control {clock}: {sum(calls.values())} kernels, {s:.0f} us in all "
      f"(kernel time, each kernel timed alone; {'base clocks, slower than a normal run' if clock == 'base' else 'the GPU own clocks'}).")
if dropped:
    print(f"Left out: {len(dropped)} kernels ({sum(v for _, v in dropped):.0f} us) launched before the frame's preprocess kernel, while the model loaded.")
elif first is None:
    print("No preprocess kernel found: every profiled kernel is counted, model loading included.")
print()
print("By kernel family:")
print()
print("| kernel | calls | total us | share | mean us |")
print("|---|---:|---:|---:|---:|")
for n, v in fam_total.most_common():
    print(f"| {n} | {fam_calls[n]} | {v:.1f} | {100 * v / s if s else 0:.1f}% | {v / fam_calls[n]:.1f} |")
print()
print("By kernel (top 30):")
print()
print("| kernel | calls | total us | share | mean us |")
print("|---|---:|---:|---:|---:|")
top = total.most_common()
for n, v in top[:30]:
    print(f"| {n} | {calls[n]} | {v:.1f} | {100 * v / s if s else 0:.1f}% | {v / calls[n]:.1f} |")
if len(top) > 30:
    rest = sum(v for _, v in top[30:])
    print(f"| ({len(top) - 30} other kernels) | {sum(calls[n] for n, _ in top[30:])} | {rest:.1f} | {100 * rest / s if s else 0:.1f}% | |")
