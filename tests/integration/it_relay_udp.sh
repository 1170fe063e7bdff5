#!/usr/bin/env bash
# fedagg-relay on real sockets: forwarding (sizes up to 65000 bytes, GSO
# batches split back into datagrams), one upstream socket per client, delay,
# loss and blackhole counted right, duplication and corruption, the port
# file, the stats line on SIGUSR1/SIGTERM, and clear errors for bad flags.
# The far end is a UDP echo server in python3.  Checks behaviour, not timing:
# delays are lower bounds, upper bounds are loose.
set -euo pipefail
: "${FA_BIN:?FA_BIN must be the bin directory of a build}"
RELAY="$FA_BIN/fedagg-relay"
[ -x "$RELAY" ] || { echo "it_relay_udp: $RELAY not built" >&2; exit 1; }
TMP=$(mktemp -d /tmp/it_relay_udp.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# Bad command lines fail with exit 2 and name what was wrong.
expect_usage_error() {
    local want="$1"; shift
    local rc=0
    "$RELAY" "$@" >"$TMP/out" 2>&1 || rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q -- "$want" "$TMP/out"; then
        echo "FAIL: fedagg-relay $* -> rc=$rc, wanted 2 and '$want' in:" >&2
        cat "$TMP/out" >&2
        exit 1
    fi
}
expect_usage_error "--listen and --upstream are required" --delay 10ms
expect_usage_error "--c2s-loss" --listen 127.0.0.1:0 --upstream 127.0.0.1:9 --c2s-loss 150%
expect_usage_error "unknown option '--lossy'" --listen 127.0.0.1:0 --upstream 127.0.0.1:9 --lossy 1
expect_usage_error "unknown profile 'wan999'" --listen 127.0.0.1:0 --upstream 127.0.0.1:9 --profile wan999
expect_usage_error "needs a value" --listen 127.0.0.1:0 --upstream 127.0.0.1:9 --delay
"$RELAY" --help | grep -q -- "--blackhole START:DUR"

exec python3 - "$RELAY" "$TMP" <<'PYEOF'
import os, re, signal, socket, subprocess, sys, threading, time

RELAY, TMP = sys.argv[1], sys.argv[2]
UDP_SEGMENT = 103
SO_RCVBUFFORCE = 33


def big_buffers(s):
    for opt in (SO_RCVBUFFORCE, socket.SO_RCVBUF):
        try:
            s.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
            return
        except OSError:
            pass


class Echo(threading.Thread):
    """Echoes every datagram; b'WHO' gets back the address it came from."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        big_buffers(self.sock)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.start()

    def run(self):
        while True:
            try:
                data, addr = self.sock.recvfrom(65535)
            except OSError:
                return
            self.received += 1
            if data == b"WHO":
                data = ("%s:%d" % addr).encode()
            self.sock.sendto(data, addr)


class Relay:
    def __init__(self, upstream, *args):
        self.port_file = os.path.join(TMP, "port.%d" % time.monotonic_ns())
        self.log = open(os.path.join(TMP, "relay.log"), "w+")
        self.p = subprocess.Popen(
            [RELAY, "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:%d" % upstream,
             "--port-file", self.port_file, "--seed", "11"] + list(args),
            stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 10
        while not os.path.exists(self.port_file):
            if self.p.poll() is not None or time.time() > deadline:
                fail("relay did not start: " + self.text())
            time.sleep(0.01)
        self.port = int(open(self.port_file).read())
        self.addr = ("127.0.0.1", self.port)

    def text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stats(self, sig=signal.SIGTERM, msg="relay stopped"):
        self.p.send_signal(sig)
        if sig == signal.SIGTERM:
            rc = self.p.wait(10)
            if rc != 0:
                fail("relay exited %d on SIGTERM" % rc)
        deadline = time.time() + 10
        while True:
            lines = [l for l in self.text().splitlines() if 'msg="%s"' % msg in l]
            if lines:
                return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)\b", lines[-1])}
            if time.time() > deadline:
                fail("no '%s' line in the relay log: %s" % (msg, self.text()))
            time.sleep(0.02)

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def client(timeout=2.0):
    c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    big_buffers(c)
    c.settimeout(timeout)
    return c


def collect(c, quiet=0.5):
    """Every datagram that arrives until `quiet` seconds pass without one."""
    got = []
    c.settimeout(quiet)
    try:
        while True:
            got.append(c.recv(65535))
    except socket.timeout:
        return got


echo = Echo()

# 1. Forwarding: datagrams of every size come back intact and in order, and
#    the port file holds the bound port.
r = Relay(echo.port)
c = client()
sizes = [0, 1, 2, 100, 1199, 1200, 1452, 9000, 32768, 65000]
for i, n in enumerate(sizes * 5):
    msg = bytes((i + k) % 251 for k in range(n))
    c.sendto(msg, r.addr)
    back, src = c.recvfrom(65535)
    if back != msg or src != r.addr:
        fail("datagram %d (%d bytes) came back as %d bytes from %s" % (i, n, len(back), src))
# 2. One upstream socket per client: the server sees distinct source ports,
#    none of them the relay's listening port, and answers reach the right one.
c2 = client()
c.sendto(b"WHO", r.addr)
c2.sendto(b"WHO", r.addr)
who1, who2 = c.recv(100).decode(), c2.recv(100).decode()
if who1 == who2 or who1.endswith(":%d" % r.port):
    fail("upstream addresses not distinct per client: %s %s" % (who1, who2))
c.sendto(b"WHO", r.addr)
if c.recv(100).decode() != who1:
    fail("a client's upstream socket changed between datagrams")
# 3. GSO batches from the client: split back into the original datagrams.
g = client()
g.connect(r.addr)
g.setsockopt(socket.IPPROTO_UDP, UDP_SEGMENT, 1200)
sent = []
for b in range(20):
    segs = [bytes([b, k]) * 600 for k in range(10)] + [bytes([b, 99]) * 250]
    g.send(b"".join(segs))
    sent += segs
    time.sleep(0.002)
got = collect(g)
if sorted(got) != sorted(sent):
    fail("GSO batches: sent %d datagrams, got %d back (sizes %s)" %
         (len(sent), len(got), sorted(set(len(x) for x in got))))
# SIGUSR1 logs the counters and the relay goes on.
st = r.stats(signal.SIGUSR1, "relay stats")
c.sendto(b"still there", r.addr)
if c.recv(100) != b"still there":
    fail("relay stopped forwarding after SIGUSR1")
st = r.stats()
want_in = len(sizes) * 5 + 3 + len(sent) + 1
if st["c2s_in"] != want_in or st["s2c_out"] != want_in or st["clients_total"] != 3:
    fail("stats: c2s_in=%d s2c_out=%d clients_total=%d, want %d, %d, 3" %
         (st["c2s_in"], st["s2c_out"], st["clients_total"], want_in, want_in))
print("forwarding ok (%d datagrams, %d GRO super-datagrams split)" % (want_in, st["gro_split"]))
r.stop()

# Client limits: a second client beyond --max-clients gets nothing; an idle
# client is forgotten, and comes back with a new upstream socket.
r = Relay(echo.port, "--max-clients", "1", "--idle-timeout", "300ms")
c, c2 = client(), client()
c.sendto(b"WHO", r.addr)
who1 = c.recv(100)
c2.sendto(b"WHO", r.addr)
if collect(c2, 0.3):
    fail("a client beyond --max-clients was served")
time.sleep(1.6)  # idle > 300 ms, and the relay scans once a second
c2.sendto(b"WHO", r.addr)
if not collect(c2, 1.0):
    fail("the slot of an idle client was not freed")
st = r.stats()
if st["clients_refused"] != 1 or st["clients_expired"] != 1:
    fail("clients_refused=%d clients_expired=%d, want 1 and 1" %
         (st["clients_refused"], st["clients_expired"]))
print("client limits ok")

# 4. Delay: 50 ms each way means no round trip under 100 ms.
r = Relay(echo.port, "--delay", "50ms", "--s2c-delay", "30")
c = client()
for i in range(10):
    t = time.monotonic()
    c.sendto(b"ping%d" % i, r.addr)
    if c.recv(100) != b"ping%d" % i:
        fail("delayed datagram altered")
    rtt = time.monotonic() - t
    if rtt < 0.080 or rtt > 2.0:
        fail("RTT %.1f ms through 50 ms + 30 ms of delay" % (rtt * 1e3))
r.stop()
print("delay ok")

# 5. Loss in one direction: 30 % of 1000 datagrams, within 5 sd of the
#    binomial mean; what the relay forwarded is what came back.
r = Relay(echo.port, "--c2s-loss", "30%")
c = client()
for i in range(1000):
    c.sendto(b"%04d" % i + b"." * 96, r.addr)
    if i % 50 == 49:
        time.sleep(0.005)
got = collect(c)
st = r.stats()
if st["c2s_in"] != 1000 or st["s2c_dropped"] != 0:
    fail("loss: c2s_in=%d s2c_dropped=%d" % (st["c2s_in"], st["s2c_dropped"]))
if abs(st["c2s_dropped_loss"] - 300) > 5 * (1000 * 0.3 * 0.7) ** 0.5:
    fail("loss: %d of 1000 dropped at 30 %%" % st["c2s_dropped_loss"])
if len(got) != 1000 - st["c2s_dropped_loss"] or len(set(got)) != len(got):
    fail("loss: %d came back, relay dropped %d" % (len(got), st["c2s_dropped_loss"]))
print("loss ok (%d of 1000 dropped)" % st["c2s_dropped_loss"])

# 6. Blackhole for the first second: nothing passes, then everything does.
r = Relay(echo.port, "--blackhole", "0:1.0")
c = client()
for i in range(5):
    c.sendto(b"early", r.addr)
if collect(c, 0.3):
    fail("a datagram crossed the blackhole")
time.sleep(1.0)  # the window opened when the relay started, before the port file
for i in range(5):
    c.sendto(b"late%d" % i, r.addr)
got = collect(c)
st = r.stats()
if sorted(got) != [b"late%d" % i for i in range(5)] or st["c2s_dropped_blackhole"] != 5:
    fail("blackhole: got %s, dropped_blackhole=%d" % (got, st["c2s_dropped_blackhole"]))
print("blackhole ok")

# A blackhole started by SIGUSR2 (--signal-blackhole), for a test to cut the
# path mid-transfer at a moment it chooses.
r = Relay(echo.port, "--signal-blackhole", "700ms")
c = client()
c.sendto(b"before", r.addr)
if c.recv(100) != b"before":
    fail("signal-blackhole: no echo before the signal")
r.p.send_signal(signal.SIGUSR2)
deadline = time.time() + 10
while 'msg="relay blackhole"' not in r.text():
    if time.time() > deadline:
        fail("no 'relay blackhole' log line after SIGUSR2: " + r.text())
    time.sleep(0.01)
c.sendto(b"during", r.addr)
if collect(c, 0.2):
    fail("a datagram crossed the signalled blackhole")
time.sleep(0.7)
c.sendto(b"after", r.addr)
if collect(c, 0.5) != [b"after"]:
    fail("the path did not come back after the signalled blackhole")
st = r.stats()
if st["c2s_dropped_blackhole"] != 1:
    fail("signal-blackhole: c2s_dropped_blackhole=%d" % st["c2s_dropped_blackhole"])
print("signalled blackhole ok")

# 7. Duplication (server to client) and corruption (client to server).
r = Relay(echo.port, "--s2c-duplicate", "100%", "--c2s-corrupt", "100%:2")
c = client()
msg = bytes(range(200))
for i in range(20):
    c.sendto(msg, r.addr)
got = collect(c)
if len(got) != 40:
    fail("duplication: %d replies to 20 datagrams" % len(got))
for g_ in got:
    flipped = sum(bin(a ^ b).count("1") for a, b in zip(g_, msg))
    if len(g_) != len(msg) or flipped != 2:
        fail("corruption: %d bits flipped, wanted 2" % flipped)
st = r.stats()
if st["s2c_duplicated"] != 20 or st["c2s_corrupted"] != 20:
    fail("stats: s2c_duplicated=%d c2s_corrupted=%d" % (st["s2c_duplicated"], st["c2s_corrupted"]))
print("duplication and corruption ok")
PYEOF
