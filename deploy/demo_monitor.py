#!/usr/bin/env python3
"""Live table of a fedagg federation's rounds, read from the aggregator's
logfmt log; writes accuracy-per-round as CSV and as an SVG chart.

usage: demo_monitor.py LOG CSV SVG ROUNDS TIMEOUT_S [PID]

Exits 0 when ROUNDS rounds completed (or the aggregator, PID, exited after
finishing), 1 on timeout or when the aggregator died first.
"""
import os
import re
import shlex
import sys
import time

PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def parse(line):
    out = {}
    for k, v in PAIR.findall(line):
        if v.startswith('"'):
            v = shlex.split(v)[0] if v != '""' else ""
        out[k] = v
    return out


def svg_chart(rows, path):
    """A small line chart of test accuracy per round, self-contained SVG."""
    w, h, ml, mr, mt, mb = 640, 360, 60, 20, 40, 50
    pw, ph = w - ml - mr, h - mt - mb
    rounds = [r["round"] for r in rows] or [0]
    accs = [r["accuracy"] for r in rows] or [0.0]
    xmax = max(max(rounds), 1)
    lo = 0.0
    hi = 1.0

    def x(v):
        return ml + pw * (v / xmax)

    def y(v):
        return mt + ph * (1 - (v - lo) / (hi - lo))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w/2}" y="22" text-anchor="middle" font-size="15">'
        f'fedagg demo: global test accuracy per round (secure aggregation, FedAdam)</text>',
    ]
    for i in range(0, 11):
        v = i / 10
        parts.append(f'<line x1="{ml}" y1="{y(v):.1f}" x2="{ml+pw}" y2="{y(v):.1f}" '
                     f'stroke="#e5e5e5"/>')
        parts.append(f'<text x="{ml-8}" y="{y(v)+4:.1f}" text-anchor="end">{v:.1f}</text>')
    step = max(1, xmax // 10)
    for v in range(0, xmax + 1, step):
        parts.append(f'<text x="{x(v):.1f}" y="{mt+ph+18}" text-anchor="middle">{v}</text>')
    parts.append(f'<line x1="{ml}" y1="{mt+ph}" x2="{ml+pw}" y2="{mt+ph}" stroke="black"/>')
    parts.append(f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{mt+ph}" stroke="black"/>')
    parts.append(f'<text x="{ml+pw/2}" y="{h-12}" text-anchor="middle">round</text>')
    parts.append(f'<text x="16" y="{mt+ph/2}" text-anchor="middle" '
                 f'transform="rotate(-90 16 {mt+ph/2})">accuracy</text>')
    if rows:
        pts = " ".join(f"{x(r['round']):.1f},{y(r['accuracy']):.1f}" for r in rows)
        parts.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
        for r in rows:
            parts.append(f'<circle cx="{x(r["round"]):.1f}" cy="{y(r["accuracy"]):.1f}" r="3" '
                         f'fill="#1f77b4"/>')
    parts.append("</svg>")
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(parts) + "\n")
    os.replace(path + ".tmp", path)


def main():
    log, csv_path, svg_path, want, timeout = sys.argv[1:6]
    pid = int(sys.argv[6]) if len(sys.argv) > 6 else None
    want, timeout = int(want), float(timeout)
    start = time.time()
    rows = []
    pending_eval = {}
    uploads = {}
    pos = 0
    buf = ""
    print(f"{'round':>5} {'regions':>7} {'dropped':>7} {'accuracy':>8} {'loss':>7} "
          f"{'upload/region':>13} {'round time':>10}", flush=True)
    with open(csv_path, "w") as f:
        f.write("round,version,regions,dropped,accuracy,loss,upload_bytes_per_region,seconds\n")
    finished = False
    while True:
        try:
            with open(log, "r", errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
        except FileNotFoundError:
            chunk = ""
        buf += chunk
        *lines, buf = buf.split("\n")
        for line in lines:
            e = parse(line)
            msg = e.get("msg", "")
            if msg == "masked upload received":
                uploads.setdefault(e.get("round"), []).append(int(e.get("bytes", "0")))
            elif msg == "global model evaluated":
                pending_eval[e.get("version")] = (float(e["accuracy"]), float(e["loss"]))
            elif msg == "round completed":
                v = e.get("version")
                acc, loss = pending_eval.get(v, (float("nan"), float("nan")))
                up = uploads.get(e.get("round"), [0])
                row = {
                    "round": int(e["round"]), "version": int(v),
                    "regions": int(e.get("participants", 0)),
                    "dropped": int(e.get("dropped", 0)),
                    "accuracy": acc, "loss": loss,
                    "upload": max(up) if up else 0,
                    "seconds": float(e.get("seconds", "nan")),
                }
                rows.append(row)
                print(f"{row['round']:>5} {row['regions']:>7} {row['dropped']:>7} "
                      f"{row['accuracy']:>8.4f} {row['loss']:>7.4f} "
                      f"{row['upload']/1e6:>10.2f} MB {row['seconds']:>8.2f} s", flush=True)
                with open(csv_path, "a") as f:
                    f.write(f"{row['round']},{row['version']},{row['regions']},{row['dropped']},"
                            f"{row['accuracy']:.4f},{row['loss']:.4f},{row['upload']},"
                            f"{row['seconds']:.3f}\n")
                svg_chart(rows, svg_path)
            elif msg == "federation finished":
                finished = True
        if len(rows) >= want or finished:
            svg_chart(rows, svg_path)
            return 0
        if pid is not None:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                print("demo: the aggregator exited before the rounds were done", file=sys.stderr)
                return 1
        if time.time() - start > timeout:
            print(f"demo: only {len(rows)} of {want} rounds after {timeout:.0f} s", file=sys.stderr)
            return 1
        time.sleep(0.3)


if __name__ == "__main__":
    sys.exit(main())
