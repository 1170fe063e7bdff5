#!/usr/bin/env bash
# The read-only dashboard of a live federation in headless Chromium: three
# regions with federated evaluation, paused by an operator after some
# rounds so that the page holds still; the DOM shows what a person sees:
# the federation's name, its round, the three regions in the table, an
# accuracy chart with one point per model version for the built-in
# evaluation and for the regions' federated evaluation, the latest
# attempts in the round table, the signed checkpoint.  The dashboard sits
# behind basic authentication (401 without, or with a wrong password; the
# probes and /metrics stay open), sends no script, and a screenshot is kept
# in the build directory.  `promtool check metrics` passes on the live
# /metrics.  Needs chromium (deploy/install-deps.sh): exits 77 without it.
set -euo pipefail
CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
    echo "SKIP: chromium is not installed (deploy/install-deps.sh installs Debian's chromium)"
    exit 77
fi
source "$FA_SRC/tests/integration/fedtest.sh"

F="$FA_BIN/fedagg"
PASSWORD="dash-$(openssl rand -hex 8)"
(umask 077 && printf '%s\n' "$PASSWORD" >"$D/dashboard.password")
export FED_AGG_EXTRA='dashboard { username: "ops" password_file: "dashboard.password" }
operators: ["alice"]'
fed_test_config 100000
# federated evaluation: each region evaluates every new model on held-out data
for r in "${REGIONS[@]}"; do
    sed -i 's|^data {$|data {\n  test_images: "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"\n  test_labels: "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"|' \
        "$D/worker-$r.textproto"
done
"$FA_SRC/deploy/pki.sh" "$D/pki" --operators alice >"$D/logs/pki-ops.log" 2>&1 || fail "pki --operators"
OPC=(--aggregator "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt"
    --cert "$D/pki/operator-alice.crt" --key "$D/pki/operator-alice.key")
URL="http://127.0.0.1:$MPORT"

fed_start_aggregator "$D"
wait_log "$D/logs/aggregator.log" 'msg="aggregator serving"' 60
grep 'msg="aggregator serving"' "$D/logs/aggregator.log" | grep -q " dashboard=password " ||
    fail "the aggregator does not say the dashboard needs a password"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 4 240 || fail "four rounds did not complete"

# --- pause, and let the last version's built-in evaluation come in -------------------
# (the regions evaluate a version when they fetch it for the next round, so
# the federated points may stay one version behind while paused)
"$F" pause "${OPC[@]}" >/dev/null || fail "pause"
settled=0
for _ in $(seq 1 60); do
    if "$F" status "${OPC[@]}" --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
sys.exit(0 if s["phase"] == "idle" and s.get("eval_version") == s["model_version"] else 1)'; then
        settled=1
        break
    fi
    sleep 0.5
done
[ "$settled" = 1 ] || fail "the federation did not settle after pause: $("$F" status "${OPC[@]}")"

# --- access control -------------------------------------------------------------------------
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
[ "$(code "$URL/dashboard")" = 401 ] || fail "the dashboard without a password"
[ "$(code -u "ops:wrong" "$URL/dashboard")" = 401 ] || fail "the dashboard with a wrong password"
[ "$(code -u "ops:$PASSWORD" "$URL/dashboard")" = 200 ] || fail "the dashboard with the password"
[ "$(code "$URL/metrics")" = 200 ] && [ "$(code "$URL/readyz")" = 200 ] || fail "/metrics or /readyz needs a password"
[ "$(code "$URL/")" = 302 ] || fail "/ does not redirect"
curl -s -D "$D/dash.headers" -o "$D/dash.html" -u "ops:$PASSWORD" "$URL/dashboard"
grep -q '<td class="region-id">eu-west</td>' "$D/dash.html" || fail "the page has no region eu-west"
grep -qi "^content-security-policy: default-src 'none'" "$D/dash.headers" || fail "no CSP"
grep -q "<script" "$D/dash.html" && fail "the page has a script"
grep -qF "$PASSWORD" "$D/dash.html" && fail "the page shows the password"
grep -q "BEGIN" "$D/dash.html" && fail "the page shows key material"

# --- what a person sees, through Chromium's DOM ------------------------------------------------
chrome() {
    local prof
    prof=$(mktemp -d "$D/chromium.XXXXXX")
    timeout 90 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --disable-dev-shm-usage --user-data-dir="$prof" "$@" 2>>"$D/logs/chromium.log"
}
AUTH_URL="http://ops:$PASSWORD@127.0.0.1:$MPORT/dashboard"
# The page against the status before and after it was loaded, once both agree
# (a late evaluation report adds a point; the snapshot is a second old at most).
same=0
for _ in $(seq 1 5); do
    sleep 1.5
    "$F" status "${OPC[@]}" --json >"$D/status.json" || fail "status --json"
    chrome --dump-dom "$AUTH_URL" >"$D/dom.html" ||
        fail "chromium --dump-dom failed: $(tail -5 "$D/logs/chromium.log")"
    "$F" status "${OPC[@]}" --json >"$D/status2.json" || fail "status --json"
    if python3 -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(0 if a["versions"] == b["versions"] and a["rounds"] == b["rounds"] else 1)' \
        "$D/status.json" "$D/status2.json"; then
        same=1
        break
    fi
done
[ "$same" = 1 ] || fail "the status kept changing while paused"
python3 - "$D/dom.html" "$D/status.json" <<'PY' || fail "the page in Chromium"
import json, sys
from html.parser import HTMLParser

class Dom(HTMLParser):
    """Elements with ids and the texts a person reads, by the few hooks we need."""
    def __init__(self):
        super().__init__()
        self.stack, self.text_of, self.points, self.region_cells, self.round_cells = [], {}, [], [], []
        self.phase_rects = 0
        self.cur = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        self.stack.append((tag, a.get("id"), cls))
        if tag == "circle" and "point" in cls.split() and any(i == "accuracy-chart" for _, i, _ in self.stack):
            self.points.append((a["data-series"], int(a["data-version"]), float(a["data-value"])))
        if tag == "rect" and "phase" in cls.split():
            self.phase_rects += 1
        if a.get("id"):
            self.text_of[a["id"]] = ""
    def handle_endtag(self, tag):
        while self.stack:
            t, _, _ = self.stack.pop()
            if t == tag:
                break
    def handle_data(self, data):
        for _, i, _ in self.stack:
            if i:
                self.text_of[i] += data
        if self.stack and self.stack[-1][0] == "td":
            cls = self.stack[-1][2].split()
            if "region-id" in cls and any(i == "regions" for _, i, _ in self.stack):
                self.region_cells.append(data.strip())
            if "round" in cls and any(i == "rounds" for _, i, _ in self.stack):
                self.round_cells.append(int(data))

dom = Dom()
dom.feed(open(sys.argv[1]).read())
st = json.load(open(sys.argv[2]))
t = dom.text_of
assert t.get("federation-id") == "demo", t.get("federation-id")
assert t.get("round") == str(st["round"]), (t.get("round"), st["round"])
assert t.get("phase") == "idle", t.get("phase")
assert "Paused by alice" in t.get("paused", ""), t.get("paused")
assert dom.region_cells == ["ap-south", "eu-west", "us-east"], dom.region_cells
want = {"global": sorted(v["version"] for v in st["versions"] if v.get("global_accuracy") is not None),
        "federated": sorted(v["version"] for v in st["versions"] if v.get("federated_accuracy") is not None)}
got = {s: sorted(v for ser, v, _ in dom.points if ser == s) for s in ("global", "federated", "central")}
assert got["global"] == want["global"], (got["global"], want["global"])
assert got["federated"] == want["federated"], (got["federated"], want["federated"])
assert got["central"] == [], got["central"]
# one point per model version: v0 (the initial model) .. the current one for the built-in evaluation
assert got["global"] == list(range(0, st["model_version"] + 1)), got["global"]
assert len(got["federated"]) >= 3, got["federated"]
latest = [a["round"] for a in st["rounds"]][::-1][:20]
assert dom.round_cells == latest, (dom.round_cells, latest)
assert dom.phase_rects >= min(len(st["rounds"]), 60), dom.phase_rects
assert t.get("checkpoint", "").startswith("fedagg.demo/federation\n"), t.get("checkpoint")
assert t.get("audit-tree-size") == str(st["audit"]["tree_size"]), (t.get("audit-tree-size"), st["audit"])
print(f"DOM: federation demo, round {t['round']}, regions {dom.region_cells}, "
      f"{len(got['global'])} global and {len(got['federated'])} federated points, "
      f"{len(dom.round_cells)} attempts in the table, {dom.phase_rects} phase segments")
PY

SHOT="${FA_BUILD:-$D}/it_dashboard.png"
rm -f "$SHOT"
chrome --window-size=1280,2400 --hide-scrollbars --screenshot="$SHOT" "$AUTH_URL" >/dev/null ||
    fail "chromium --screenshot failed: $(tail -5 "$D/logs/chromium.log")"
[ -s "$SHOT" ] && [ "$(head -c 8 "$SHOT" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    fail "no PNG screenshot at $SHOT"
echo "screenshot: $SHOT"

# --- the live /metrics passes promtool's checks -----------------------------------------------
if command -v promtool >/dev/null; then
    curl -sf "$URL/metrics" >"$D/metrics.txt" || fail "GET /metrics"
    promtool check metrics <"$D/metrics.txt" >"$D/promtool.out" 2>&1 ||
        fail "promtool check metrics: $(cat "$D/promtool.out")"
    grep -q '^fedagg_tls_certificate_expiry_timestamp_seconds{certificate="server"} [0-9]' "$D/metrics.txt" ||
        fail "no certificate expiry metric"
    exp=$(openssl x509 -in "$D/pki/server.crt" -noout -enddate | cut -d= -f2)
    want=$(date -d "$exp" +%s)
    grep -q "^fedagg_tls_certificate_expiry_timestamp_seconds{certificate=\"server\"} $want\$" "$D/metrics.txt" ||
        fail "expiry metric is not the certificate's notAfter ($want)"
else
    echo "note: promtool not installed; /metrics not linted (deploy/install-deps.sh)"
fi

"$F" resume "${OPC[@]}" >/dev/null || fail "resume"
! grep -h 'level=error' "$D"/logs/aggregator.log || fail "errors in the aggregator's log"
echo "PASS"
