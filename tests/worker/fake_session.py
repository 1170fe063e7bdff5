#!/usr/bin/env python3
"""A long-lived trainer that behaves (or misbehaves) on purpose, for the
tests of worker/trainer_session.h.  It speaks the line protocol of
docs/trainer-contract.md over $FEDAGG_SOCKET and trains nothing: a "done"
carries num_examples = round + 1 and metrics {"round": round}.

usage: fake_session.py BEHAVIOUR
  ok          serves every round; exits 0 on shutdown (writes "shutdown" to
              $FAKE_MARK when set)
  die_once    the first time ($FAKE_STATE absent) exits 3 on its first round
  hang        never answers a round
  noconnect   never connects
  nohello     connects and never says hello
  exit_early  exits 4 before connecting
  garbage     answers a line that is not JSON
  array       answers a JSON array
  unknown     answers {"type": "progress"}
  longline    answers a line of 2 MiB
  wronground  answers done for another round
  badproto    says hello with protocol 2
  error       answers "error" to its first round, then serves
  split       sends each answer in three pieces, 50 ms apart
  close       closes its connection on the first round and keeps running
  stubborn    ignores shutdown and SIGTERM
"""
import json
import os
import signal
import socket
import sys
import time


def main():
    mode = sys.argv[1]
    print("fake_session: %s starting, pid %d" % (mode, os.getpid()))
    sys.stdout.flush()
    if mode == "exit_early":
        print("fake_session: cannot load the data set", file=sys.stderr)
        return 4
    if mode == "noconnect":
        time.sleep(300)
        return 0
    if mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(os.environ["FEDAGG_SOCKET"])
    if mode == "nohello":
        time.sleep(300)
        return 0
    f = s.makefile("rwb")

    def send(obj):
        f.write((json.dumps(obj) + "\n").encode())
        f.flush()

    send({"type": "hello", "protocol": 2 if mode == "badproto" else 1})
    rounds = 0
    for line in f:
        msg = json.loads(line)
        if msg["type"] == "shutdown":
            if mode == "stubborn":
                time.sleep(300)
            if os.environ.get("FAKE_MARK"):
                with open(os.environ["FAKE_MARK"], "w") as fh:
                    fh.write("shutdown")
            return 0
        assert msg["type"] == "round", msg
        r = msg["round"]
        rounds += 1
        if mode == "die_once" and not os.path.exists(os.environ["FAKE_STATE"]):
            open(os.environ["FAKE_STATE"], "w").close()
            print("fake_session: dying on purpose in round %d" % r, file=sys.stderr)
            sys.stderr.flush()
            os._exit(3)
        if mode == "hang":
            time.sleep(300)
        if mode == "close":
            f.close()
            s.close()
            time.sleep(300)
        if mode == "garbage":
            f.write(b"this is not json\n")
            f.flush()
            continue
        if mode == "array":
            f.write(b"[1, 2]\n")
            f.flush()
            continue
        if mode == "unknown":
            send({"type": "progress", "round": r})
            continue
        if mode == "longline":
            f.write(b"x" * (2 << 20) + b"\n")
            f.flush()
            continue
        if mode == "error" and rounds == 1:
            send({"type": "error", "round": r, "message": "CUDA out of memory\nat step 3"})
            continue
        if msg["task"] == "evaluate":
            answer = {"type": "done", "round": r,
                      "eval": {"num_examples": 5, "loss": 1.5, "accuracy": 0.4}}
        else:
            if not msg.get("output") or msg.get("input") != os.environ.get("FEDAGG_INPUT_WANT", msg.get("input")):
                return 7
            answer = {"type": "done", "round": r + (1 if mode == "wronground" else 0),
                      "num_examples": r + 1, "metrics": {"round": r}}
        data = (json.dumps(answer) + "\n").encode()
        if mode == "split":
            for i in range(3):
                f.write(data[i * len(data) // 3:(i + 1) * len(data) // 3])
                f.flush()
                time.sleep(0.05)
        else:
            f.write(data)
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
