"""Shared by the kit's tests: paths, subprocess environments, a scratch dir."""

import os
import shutil
import sys
import tempfile
import unittest

TESTS = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(TESTS)               # python/: the kit's source tree
REPO = os.path.dirname(PYDIR)
DATA = os.path.join(TESTS, "data")
TRAINERS = os.path.join(TESTS, "trainers")
EXAMPLES = os.path.join(REPO, "examples")
PY = sys.executable


def child_env(**extra):
    """The environment of a trainer subprocess: ours, minus anything of a
    worker or torchrun, plus PYTHONPATH to the kit and the given entries."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FEDAGG_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                         "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    env["FEDAGG_DEVICE"] = "cpu"
    for k, v in extra.items():
        env[k] = str(v)
    return env


class TmpDirCase(unittest.TestCase):
    """A test case with a fresh scratch directory self.tmp."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fedagg-pytest-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def path(self, *names):
        return os.path.join(self.tmp, *names)


class WorkerSide:
    """The worker's end of the long-lived trainer socket: listens on
    <dir>/<name>.sock, starts the trainer command with FEDAGG_SOCKET set
    (its output in <dir>/<name>.log), and trades JSON lines with it."""

    def __init__(self, directory, timeout=60.0, name="trainer"):
        import socket
        self.dir = directory
        self.sock_path = os.path.join(directory, name + ".sock")
        self.log_path = os.path.join(directory, name + ".log")
        self.timeout = timeout
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(self.sock_path)
        self.srv.listen(1)
        self.srv.settimeout(timeout)
        self.conn = self.rfile = self.proc = None

    def start(self, argv, env):
        import subprocess
        env = dict(env, FEDAGG_SOCKET=self.sock_path)
        self.logf = open(self.log_path, "wb")
        # its own process group, as the worker starts it
        self.proc = subprocess.Popen(argv, env=env, stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.dir,
                                     start_new_session=True)

    def accept(self):
        import socket
        import time
        deadline = time.monotonic() + self.timeout
        self.srv.settimeout(0.2)
        while True:
            try:
                self.conn, _ = self.srv.accept()
                break
            except socket.timeout:
                if self.proc.poll() is not None:
                    raise AssertionError("the trainer exited (status %d) without connecting; "
                                         "its log:\n%s" % (self.proc.returncode, self.log()))
                if time.monotonic() > deadline:
                    raise AssertionError("the trainer did not connect within %.0f s; its log:"
                                         "\n%s" % (self.timeout, self.log())) from None
        self.conn.settimeout(self.timeout)
        self.rfile = self.conn.makefile("rb")

    def send(self, msg):
        import json
        self.conn.sendall(json.dumps(msg).encode() + b"\n")

    def send_raw(self, data):
        self.conn.sendall(data)

    def recv(self):
        import json
        import socket
        try:
            line = self.rfile.readline()
        except socket.timeout:
            raise AssertionError("no message from the trainer within %.0f s; its log:\n%s"
                                 % (self.timeout, self.log())) from None
        if not line:
            raise AssertionError("the trainer closed the socket; its log:\n%s" % self.log())
        if not line.endswith(b"\n"):
            raise AssertionError("a message without its newline: %r" % line)
        return json.loads(line)

    def close_socket(self):
        if self.conn is not None:
            self.rfile.close()
            self.conn.close()
            self.conn = None

    def wait(self, timeout=None):
        import subprocess
        try:
            return self.proc.wait(timeout or self.timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("the trainer did not exit; its log:\n%s" % self.log()) from None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def close(self):
        self.close_socket()
        if self.proc is not None:
            import signal
            try:  # the whole group (torchrun's ranks too), as the worker does
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
            self.logf.close()
        self.srv.close()
