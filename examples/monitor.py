#!/usr/bin/env python3
"""Live table of an example federation's rounds and evaluations, read from
the aggregator's logfmt log (standard library only); writes it as CSV.

usage: monitor.py LOG ROUNDS TIMEOUT_S AGGREGATOR_PID CSV

A row per completed round: the regions in it, its seconds, the federated
evaluation of the model the round trained from (version round - 1: the
example-weighted mean of what the regions measured on their own held-out
data, "evaluation report accepted") and the latest central evaluation
(the evaluator command on the public test set, "model evaluated by the
evaluator command").  After the last round it waits for the aggregator to
stop (it gives the regions a grace to evaluate the final model) and prints
the final model's evaluations.

Exits 0 when ROUNDS rounds completed, 1 on timeout or when the aggregator
stopped first.
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


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by the shell) is not alive
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class State:
    def __init__(self):
        self.fedeval = {}   # version -> (mean accuracy, reports, examples)
        self.central = {}   # version -> (accuracy, examples)
        self.rows = []

    def feed(self, kv):
        msg = kv.get("msg")
        if msg == "evaluation report accepted":
            self.fedeval[int(kv["version"])] = (float(kv["mean_accuracy"]), int(kv["reports"]),
                                                int(kv["examples"]))
        elif msg == "model evaluated by the evaluator command":
            self.central[int(kv["version"])] = (float(kv["accuracy"]), int(kv["examples"]))
        elif msg == "round completed":
            return self.row(kv)
        return None

    def latest_central(self):
        if not self.central:
            return None, None
        v = max(self.central)
        return v, self.central[v][0]

    def row(self, kv):
        r, v = int(kv["round"]), int(kv["version"])
        fe = self.fedeval.get(v - 1)
        cv, ca = self.latest_central()
        row = {"round": r, "version": v, "regions": int(kv["participants"]),
               "seconds": float(kv["seconds"]),
               "fedeval_version": v - 1 if fe else "", "fedeval_accuracy": fe[0] if fe else "",
               "fedeval_regions": fe[1] if fe else "", "central_version": "" if cv is None else cv,
               "central_accuracy": "" if ca is None else ca}
        self.rows.append(row)
        return row


def fmt_row(row):
    fe = ("%.4f (v%d, %d regions)" % (row["fedeval_accuracy"], row["fedeval_version"],
                                      row["fedeval_regions"])
          if row["fedeval_regions"] != "" else "-")
    ce = ("%.4f (v%d)" % (row["central_accuracy"], row["central_version"])
          if row["central_accuracy"] != "" else "-")
    return "%5d %7d %7.1f s   %-26s %s" % (row["round"], row["regions"], row["seconds"], fe, ce)


def write_csv(rows, path):
    cols = ["round", "version", "regions", "seconds", "fedeval_version", "fedeval_accuracy",
            "fedeval_regions", "central_version", "central_accuracy"]
    with open(path + ".tmp", "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join(str(r[c]) for c in cols) + "\n")
    os.replace(path + ".tmp", path)


def main():
    log, want, timeout, pid, csv_path = sys.argv[1:6]
    want, timeout, pid = int(want), float(timeout), int(pid)
    start = time.time()
    st = State()
    write_csv([], csv_path)
    print("round regions    time   federated evaluation        central evaluation")
    print("                        (regions' held-out data)    (evaluator, test set)", flush=True)
    pos, buf, done_at = 0, "", None
    while True:
        try:
            with open(log) as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
        except FileNotFoundError:
            chunk = ""
        buf += chunk
        *lines, buf = buf.split("\n")
        for line in lines:
            row = st.feed(parse(line))
            if row:
                print(fmt_row(row), flush=True)
                write_csv(st.rows, csv_path)
                if len(st.rows) >= want and done_at is None:
                    done_at = time.time()
        running = alive(pid)
        if done_at is not None and (not running or time.time() - done_at > 60):
            break
        if not running:
            print("monitor: the aggregator stopped after %d of %d rounds" % (len(st.rows), want),
                  file=sys.stderr)
            return 1
        if time.time() - start > timeout:
            print("monitor: timeout after %.0f s (%d of %d rounds)" % (timeout, len(st.rows), want),
                  file=sys.stderr)
            return 1
        time.sleep(0.3)
    fe = st.fedeval.get(want)
    if fe:
        # the regions that evaluated the final model before the aggregator stopped
        n = st.rows[-1]["regions"] if st.rows else fe[1]
        print("final model (version %d): federated evaluation %.4f (%d of %d regions, %d held-out "
              "examples)" % (want, fe[0], fe[1], max(n, fe[1]), fe[2]))
    c = st.central.get(want)
    if c:
        print("final model (version %d): central evaluation %.4f (%d test images)"
              % (want, c[0], c[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
