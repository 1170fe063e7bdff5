#!/usr/bin/env bash
# Operating a live federation with the operators' CLI: operator certificates
# from deploy/pki.sh --operators (idempotent), an operator config checked by
# `fedagg config check --type operator`, `fedagg status|regions|rounds|models|
# audit-head` as tables and --json, the roles kept apart (a region's
# certificate gets 403 on the admin API, an operator's on the regions' API),
# pause / resume / abort / drain / admit doing what they say (no round
# opens while paused, the aborted attempt recorded, a drained region left
# out of the rounds until admitted), each in the signed audit log and the
# aggregator's log with the operator's name, and `fedagg watch` in a
# pseudo-terminal: redrawn in place, q and Ctrl-C quit and the terminal is
# given back as it was.
source "$FA_SRC/tests/integration/fedtest.sh"

F="$FA_BIN/fedagg"
# alice may operate; bob holds a certificate of the same CA but is not listed
export FED_AGG_EXTRA='operators: ["alice"]'
fed_test_config 100000 # far more rounds than the test lasts: it never finishes by itself

# --- operator certificates ---------------------------------------------------
"$FA_SRC/deploy/pki.sh" "$D/pki" --operators alice,bob >"$D/logs/pki-ops.log" 2>&1 ||
    fail "pki.sh --operators: $(cat "$D/logs/pki-ops.log")"
san=$(openssl x509 -in "$D/pki/operator-alice.crt" -noout -ext subjectAltName | tail -n +2 | sed 's/^ *//')
[ "$san" = "URI:fedagg://operator/alice" ] || fail "operator-alice SAN '$san'"
[ "$(stat -c %a "$D/pki/operator-alice.key")" = 600 ] || fail "operator key not 0600"
openssl verify -CAfile "$D/pki/ca.crt" -purpose sslclient "$D/pki/operator-bob.crt" >/dev/null ||
    fail "operator-bob.crt does not verify as a client certificate"
"$FA_SRC/deploy/pki.sh" "$D/pki" --regions "$ALL" --operators alice,bob >"$D/logs/pki-ops2.log" 2>&1
grep -q "nothing changed" "$D/logs/pki-ops2.log" || fail "pki.sh rerun changed things: $(cat "$D/logs/pki-ops2.log")"

# --- the operator config ---------------------------------------------------------
cat >"$D/operator.textproto" <<EOF
aggregator: "127.0.0.1:$PORT"
tls {
  cert_file: "pki/operator-alice.crt"
  key_file: "pki/operator-alice.key"
  ca_file: "pki/ca.crt"
  server_name: "localhost"
}
EOF
"$F" config check --type operator "$D/operator.textproto" >"$D/check.out" 2>&1 ||
    fail "config check: $(cat "$D/check.out")"
grep -q "OK (operator config: aggregator 127.0.0.1:$PORT" "$D/check.out" || fail "check: $(cat "$D/check.out")"
cat >"$D/bad-operator.textproto" <<EOF
aggregator: "127.0.0.1"
tls {
  cert_file: "pki/operator-carol.crt"
  key_file: "pki/operator-alice.key"
  ca_file: "pki/ca.crt"
}
EOF
rc=0
"$F" config check --type operator "$D/bad-operator.textproto" >"$D/check-bad.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a bad operator config: exit $rc"
grep -q 'bad-operator.textproto:1:1: `aggregator`: "127.0.0.1": expected host:port' "$D/check-bad.out" &&
    grep -q 'bad-operator.textproto:3:3: `tls.cert_file`: .*operator-carol.crt: no such file' "$D/check-bad.out" ||
    fail "bad config messages: $(cat "$D/check-bad.out")"

OPC=(--config "$D/operator.textproto")
REGION_CERT=(--aggregator "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt"
    --cert "$D/pki/client-eu-west.crt" --key "$D/pki/client-eu-west.key")

# --- usage mistakes: exit 2 before any connection ------------------------------------
rc=0; "$F" status >/dev/null 2>"$D/usage.err" || rc=$?
[ "$rc" = 2 ] && grep -q -- "--aggregator HOST:PORT is required" "$D/usage.err" || fail "status without address: $rc $(cat "$D/usage.err")"
rc=0; "$F" drain "${OPC[@]}" >/dev/null 2>"$D/usage.err" || rc=$?
[ "$rc" = 2 ] && grep -q "which region" "$D/usage.err" || fail "drain without region: $rc"
rc=0; "$F" drain 'a&b' "${OPC[@]}" >/dev/null 2>"$D/usage.err" || rc=$?
[ "$rc" = 2 ] || fail "drain 'a&b': exit $rc"
rc=0; "$F" rounds --bogus "${OPC[@]}" >/dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "unknown option: exit $rc"

fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 2 240 || fail "two rounds did not complete"

# --- documents ---------------------------------------------------------------------
"$F" status "${OPC[@]}" >"$D/status.out" 2>&1 || fail "fedagg status: $(cat "$D/status.out")"
grep -q "^Federation demo" "$D/status.out" || fail "status: $(cat "$D/status.out")"
for r in "${REGIONS[@]}"; do
    grep -Eq "^$r +connected " "$D/status.out" || fail "status lacks region $r: $(cat "$D/status.out")"
done
FEDAGG_OPERATOR_CONFIG="$D/operator.textproto" "$F" status --json >"$D/status.json" ||
    fail "status --json with \$FEDAGG_OPERATOR_CONFIG"
"$F" regions "${OPC[@]}" --json >"$D/regions.json" || fail "regions --json"
"$F" rounds "${OPC[@]}" --json >"$D/rounds.json" || fail "rounds --json"
"$F" models "${OPC[@]}" --json >"$D/models.json" || fail "models --json"
"$F" audit-head "${OPC[@]}" --json >"$D/audit-head.json" || fail "audit-head --json"
python3 - "$D" <<'PY' || fail "JSON documents"
import json, sys
d = sys.argv[1]
st = json.load(open(f"{d}/status.json"))
assert st["federation_id"] == "demo" and st["rounds_completed"] >= 2 and st["paused"] is False, st
assert [r["id"] for r in st["regions"]] == ["ap-south", "eu-west", "us-east"], st["regions"]
rg = json.load(open(f"{d}/regions.json"))["regions"]
assert all(r["rounds_participated"] >= 1 and r["bytes_received"] > 0 for r in rg), rg
rd = json.load(open(f"{d}/rounds.json"))["rounds"]
assert rd and rd[0]["outcome"] == "completed" and rd[0]["round"] == 1, rd[:1]
assert set(rd[0]["phases"]) >= {"advertise", "shares", "masked", "consistency", "unmask"}, rd[0]
ms = json.load(open(f"{d}/models.json"))["models"]
assert ms and all(len(m["sha256"]) == 64 for m in ms), ms
ah = json.load(open(f"{d}/audit-head.json"))
assert ah["tree_size"] >= 2 and ah["checkpoint"].startswith("fedagg.demo/federation\n"), ah
print(f"status round {st['round']}, {len(rd)} attempts, {len(ms)} models, tree {ah['tree_size']}")
PY
"$F" rounds "${OPC[@]}" --last 2 >"$D/rounds.out" || fail "rounds"
head -1 "$D/rounds.out" | grep -q "^ROUND  ATTEMPT  OUTCOME" || fail "rounds table: $(cat "$D/rounds.out")"
[ "$(wc -l <"$D/rounds.out")" = 3 ] || fail "rounds --last 2: $(cat "$D/rounds.out")"
"$F" models "${OPC[@]}" | grep -Eq "^ +[0-9]+ +[0-9]+ .* [0-9a-f]{64}$" || fail "models table"
"$F" audit-head "${OPC[@]}" | grep -q "^fedagg.demo/federation$" || fail "audit-head text"
# the same rendering from a saved document
"$F" regions --from "$D/regions.json" | grep -Eq "^us-east +connected" || fail "regions --from"

# --- roles ----------------------------------------------------------------------------
rc=0
"$F" status "${REGION_CERT[@]}" >/dev/null 2>"$D/refused.err" || rc=$?
[ "$rc" = 1 ] && grep -q "answered 403: the admin API takes operator certificates only" "$D/refused.err" ||
    fail "a region certificate on the admin API: exit $rc: $(cat "$D/refused.err")"
rc=0
"$F" pause "${REGION_CERT[@]}" >/dev/null 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a region paused the federation (exit $rc)"
h3op() {
    "$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
        --cert "$D/pki/operator-alice.crt" --key "$D/pki/operator-alice.key" --show-headers "$@"
}
for path in /v1/status /v1/models/latest /v1/federation; do
    h3op "$path" --out "$D/h3.body" >"$D/h3.out" 2>&1 || true
    grep -q '"status":403' "$D/h3.out" || grep -q ' 403' "$D/h3.out" ||
        fail "an operator certificate on the regions' $path: $(cat "$D/h3.out")"
done
grep -q 'msg="admin request" proc=aggregator operator=eu-west role=region method=GET path=/v1/admin/status status=403' \
    "$D/logs/aggregator.log" || fail "the refused admin request is not logged with its peer"
grep -q 'msg="admin request" proc=aggregator operator=alice role=operator method=GET path=/v1/admin/status status=200' \
    "$D/logs/aggregator.log" || fail "admin requests are not logged with the operator's name"
# an operator certificate of the CA whose name the config does not list is
# refused in the TLS handshake, before any request
rc=0
"$F" pause --aggregator "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
    --cert "$D/pki/operator-bob.crt" --key "$D/pki/operator-bob.key" >/dev/null 2>"$D/bob.err" || rc=$?
[ "$rc" = 1 ] || fail "an unlisted operator: exit $rc: $(cat "$D/bob.err")"
grep -q "names operator 'bob', who is not in the aggregator config's .operators." "$D/logs/aggregator.log" ||
    fail "the refusal of bob is not logged with its reason"
grep -q 'operator=bob' "$D/logs/aggregator.log" && fail "bob reached the admin API"

# --- pause, resume, abort ----------------------------------------------------------------
j() { "$F" status "${OPC[@]}" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
"$F" pause "${OPC[@]}" >"$D/pause.out" 2>&1 || fail "pause: $(cat "$D/pause.out")"
grep -q "^paused by alice: no new round opens after round" "$D/pause.out" || fail "pause: $(cat "$D/pause.out")"
rc=0; "$F" pause "${OPC[@]}" >/dev/null 2>"$D/pause2.err" || rc=$?
[ "$rc" = 1 ] && grep -q "answered 409: the federation is already paused (by alice)" "$D/pause2.err" ||
    fail "pausing twice: exit $rc: $(cat "$D/pause2.err")"
for _ in $(seq 1 150); do
    [ "$(j 'd["phase"]')" = idle ] && break
    sleep 0.2
done
[ "$(j 'd["phase"]')" = idle ] || fail "still $(j 'd["phase"]') 30 s after pause"
done_paused=$(j 'd["rounds_completed"]')
"$F" status "${OPC[@]}" | grep -q "PAUSED by alice" || fail "status does not say paused"
rc=0; "$F" abort "${OPC[@]}" >/dev/null 2>"$D/abort-idle.err" || rc=$?
[ "$rc" = 1 ] && grep -q "409: no attempt is in flight (phase idle)" "$D/abort-idle.err" ||
    fail "abort while paused: exit $rc $(cat "$D/abort-idle.err")"
sleep 3
[ "$(j 'd["rounds_completed"]')" = "$done_paused" ] || fail "a round completed while paused"
[ "$(fed_rounds_completed "$D")" = "$done_paused" ] || fail "the log shows a round while paused"

"$F" resume "${OPC[@]}" | grep -q "^resumed by alice" || fail "resume"
aborted=0
for _ in $(seq 1 50); do # the attempt that resume opened, or the next
    if "$F" abort "${OPC[@]}" >"$D/abort.out" 2>&1; then aborted=1; break; fi
    sleep 0.1
done
[ "$aborted" = 1 ] || fail "abort never found an attempt in flight: $(cat "$D/abort.out")"
grep -q "^aborted by alice; the federation is now at round" "$D/abort.out" || fail "abort: $(cat "$D/abort.out")"
fed_wait_rounds "$D" $((done_paused + 2)) 120 || fail "no rounds after resume and abort"
"$F" rounds "${OPC[@]}" --json | python3 -c '
import json, sys
rd = json.load(sys.stdin)["rounds"]
ab = [a for a in rd if a["outcome"] == "aborted" and "alice" in a.get("reason", "")]
assert ab, [(a["round"], a["attempt"], a["outcome"], a.get("reason")) for a in rd[-5:]]
print("aborted attempt:", ab[-1]["round"], ab[-1]["attempt"], ab[-1]["reason"])
' || fail "the aborted attempt is not in the rounds"

# --- drain and admit ---------------------------------------------------------------------
rc=0; "$F" drain nowhere "${OPC[@]}" >/dev/null 2>"$D/drain-bad.err" || rc=$?
[ "$rc" = 1 ] && grep -q "404: region 'nowhere' is not a member" "$D/drain-bad.err" || fail "drain nowhere: $rc $(cat "$D/drain-bad.err")"
"$F" drain us-east "${OPC[@]}" | grep -q "^region us-east drained by alice" || fail "drain us-east"
"$F" regions "${OPC[@]}" | grep -Eq "^us-east +drained " || fail "regions does not show us-east drained"
base=$(fed_rounds_completed "$D")
fed_wait_rounds "$D" $((base + 3)) 120 || fail "no rounds with us-east drained"
"$F" rounds "${OPC[@]}" --json | python3 -c '
import json, sys
rd = [a for a in json.load(sys.stdin)["rounds"] if a["outcome"] == "completed"]
assert "us-east" not in rd[-1]["participants"] and len(rd[-1]["participants"]) == 2, rd[-1]
' || fail "a drained region took part"
"$F" admit us-east "${OPC[@]}" | grep -q "^region us-east admitted by alice" || fail "admit us-east"
for _ in $(seq 1 300); do
    "$F" rounds "${OPC[@]}" --json | python3 -c '
import json, sys
rd = [a for a in json.load(sys.stdin)["rounds"] if a["outcome"] == "completed"]
sys.exit(0 if "us-east" in rd[-1]["participants"] else 1)' && break
    sleep 0.2
done
"$F" rounds "${OPC[@]}" --json | python3 -c '
import json, sys
rd = [a for a in json.load(sys.stdin)["rounds"] if a["outcome"] == "completed"]
assert "us-east" in rd[-1]["participants"], rd[-1]' || fail "us-east does not take part again after admit"

# --- watch in a pseudo-terminal: q, then Ctrl-C -----------------------------------------------
for key in q ctrl-c; do
    python3 - "$F" "$D/operator.textproto" "$key" <<'PY' || fail "watch ($key)"
import os, pty, select, sys, termios, time
f, cfg, key = sys.argv[1:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(f, [f, "watch", "--config", cfg, "--interval", "300"])
out = b""
def read_for(t):
    global out
    end = time.time() + t
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return
read_for(3)
assert b"\x1b[?1049h" in out, "no alternate screen"
frames = out.count(b"\x1b[H")
assert frames >= 2, f"not redrawn in place ({frames} frames)"
for want in (b"Round ", b"REGION", b"ap-south", b"eu-west", b"us-east", b"(q quits)"):
    assert want in out, f"no {want!r} in the view"
attrs = termios.tcgetattr(fd)
assert not (attrs[3] & termios.ICANON), "the terminal is not in raw input while watching"
os.write(fd, b"q" if key == "q" else b"\x03")
read_for(2)
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"watch exit status {status}"
assert out.rstrip().endswith(b"\x1b[?1049l"), "the screen was not given back"
attrs = termios.tcgetattr(fd)
assert attrs[3] & termios.ICANON and attrs[3] & termios.ECHO, "the terminal modes were not restored"
print(f"watch ({key}): {frames}+ frames, exit 0, screen restored")
PY
done
"$F" watch "${OPC[@]}" --frames 2 --interval 200 </dev/null >"$D/watch.out" || fail "watch --frames"
[ "$(grep -c "(q quits)" "$D/watch.out")" = 2 ] || fail "watch --frames 2: $(cat "$D/watch.out")"

# --- the audit log and the aggregator's log keep who did what -----------------------------
grep -q 'msg="admin action" proc=aggregator operator=alice action=drain region=us-east' "$D/logs/aggregator.log" ||
    fail "no log line for the drain"
fed_stop_all
"$F" audit verify "$D/state/audit.log" --pubkey "$D/keys/aggregator.pub" \
    --config "$D/aggregator.textproto" >"$D/logs/audit-verify.log" 2>&1 ||
    fail "audit verify: $(cat "$D/logs/audit-verify.log")"
"$F" audit show "$D/state/audit.log" --json >"$D/audit.jsonl" || fail "audit show"
python3 - "$D/audit.jsonl" <<'PY' || fail "admin records in the audit log"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
acts = [(r["admin"]["operator"], r["admin"]["action"], r["admin"].get("region", ""))
        for r in recs if "admin" in r]
want = [("alice", "pause", ""), ("alice", "resume", ""), ("alice", "abort", ""),
        ("alice", "drain", "us-east"), ("alice", "admit", "us-east")]
assert acts == want, acts
print(f"{len(recs)} records, admin actions: {acts}")
PY
grep -h 'level=error' "$D"/logs/aggregator.log && fail "errors in the aggregator's log"
echo "PASS"
