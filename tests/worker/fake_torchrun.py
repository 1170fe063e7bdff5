#!/usr/bin/env python3
"""A stand-in for `torchrun --standalone --nproc_per_node=N script args...`
for the external trainer's tests: it starts N copies of `python3 script
args...` with RANK, LOCAL_RANK and WORLD_SIZE set (and the rest of its own
environment passed through, as torchrun does), waits for all of them and
exits with the first non-zero status.  Rank 0 does the work of a trainer;
the others only read the input (fake_trainer.py).

usage: fake_torchrun.py N script args...
"""
import os
import subprocess
import sys


def main():
    n = int(sys.argv[1])
    procs = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n))
        procs.append(subprocess.Popen([sys.executable] + sys.argv[2:], env=env))
    status = 0
    for p in procs:
        rc = p.wait()
        if rc != 0 and status == 0:
            status = rc
    return status


if __name__ == "__main__":
    sys.exit(main())
