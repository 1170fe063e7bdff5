"""fedagg.protocol - the long-lived trainer's side of the worker socket
(docs/trainer-contract.md, "Long-lived mode").

JSON objects, one per line ("\\n"-terminated UTF-8), both ways, on the Unix
stream socket named by FEDAGG_SOCKET:

    trainer -> worker   {"type": "hello", "protocol": 1}            once
    worker -> trainer   {"type": "round", "task": "train", "round": 7, "version": 6,
                         "region": "eu-west", "input": "...", "output": "..."}
    trainer -> worker   {"type": "done", "round": 7, "num_examples": ..., "metrics": {...},
                         "eval": {...}}  or  {"type": "error", "round": 7, "message": "..."}
    worker -> trainer   {"type": "shutdown"}

A line longer than MAX_LINE bytes, a message that is not a JSON object or an
unknown type is a protocol error (ProtocolError).  As the worker's side
(worker/trainer_proto.h), a trailing "\r" and empty lines are tolerated.
"""

import errno
import json
import socket
import time

PROTOCOL = 1
MAX_LINE = 1 << 20  # bytes of one message, without its "\n"
MESSAGE_TYPES = ("round", "shutdown")


class ProtocolError(RuntimeError):
    """The worker's side broke the protocol (or the connection broke)."""


def encode(msg):
    """One message as its line: compact ASCII JSON (no NaN) and "\\n"."""
    line = json.dumps(msg, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    data = line.encode("ascii") + b"\n"
    if len(data) - 1 > MAX_LINE:
        raise ProtocolError("message of %d bytes exceeds the protocol's %d" % (len(data) - 1,
                                                                            MAX_LINE))
    return data


def decode(line, where="worker socket"):
    """A received line (bytes, with or without its "\\n") as a dict with a
    known "type"; ProtocolError otherwise."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    if len(line) > MAX_LINE:
        raise ProtocolError("%s: a line of more than %d bytes" % (where, MAX_LINE))
    try:
        msg = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ProtocolError("%s: message is not UTF-8 (byte %d)" % (where, e.start)) from None
    except ValueError as e:
        raise ProtocolError("%s: message is not JSON: %s: %.80r" % (where, e, line)) from None
    if not isinstance(msg, dict):
        raise ProtocolError("%s: message is not a JSON object: %.80r" % (where, line))
    t = msg.get("type")
    if t not in MESSAGE_TYPES:
        raise ProtocolError("%s: unknown message type %r (expected one of %s)"
                            % (where, t, ", ".join(MESSAGE_TYPES)))
    return msg


class Channel:
    """A connected socket to the worker.  recv() returns the next message,
    or None at end of file."""

    def __init__(self, path, connect_timeout_s=5.0):
        self.path = path
        self.sock = _connect(path, connect_timeout_s)
        self._rfile = self.sock.makefile("rb")

    def send(self, msg):
        self.sock.sendall(encode(msg))

    def recv(self):
        while True:
            line = self._rfile.readline(MAX_LINE + 3)
            if not line:
                return None
            if not line.endswith(b"\n"):
                if len(line) > MAX_LINE:
                    raise ProtocolError("%s: a line of more than %d bytes" % (self.path, MAX_LINE))
                raise ProtocolError("%s: connection closed in the middle of a message (%d bytes "
                                    "without a newline)" % (self.path, len(line)))
            if line.strip(b"\r\n"):
                return decode(line, self.path)

    def close(self):
        try:
            self._rfile.close()
        finally:
            self.sock.close()


def _connect(path, timeout_s):
    """Connects, retrying while the socket is not there yet (ENOENT,
    ECONNREFUSED) for up to timeout_s."""
    deadline = time.monotonic() + timeout_s
    pause = 0.01
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except OSError as e:
            s.close()
            if e.errno not in (errno.ENOENT, errno.ECONNREFUSED) or time.monotonic() > deadline:
                raise ProtocolError("FEDAGG_SOCKET=%s: cannot connect: %s (is fedagg-worker "
                                    "running this trainer in long-lived mode?)"
                                    % (path, e.strerror or e)) from None
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
