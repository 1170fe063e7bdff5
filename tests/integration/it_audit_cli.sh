#!/bin/bash
# `fedagg audit` end to end on logs written through the aggregator's C API
# (tests/tools/audit_mklog): verify (region keys from flags and from the
# aggregator config), show (table and JSON lines), prove + check-proof
# offline, consistency against an old checkpoint, tampering and a torn write
# named with the right record index, usage errors.
set -euo pipefail

B=${FA_BIN:?FA_BIN must point at the build bin directory}
F="$B/fedagg"
MK="$B/fa-audit-mklog"
work=$(mktemp -d /tmp/fa_it_audit.XXXXXX)
trap 'rm -rf "$work"' EXIT

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# expect_rc WANT CMD...: runs CMD, output in $work/out and $work/err.
expect_rc() {
    local want=$1 rc
    shift
    set +e
    "$@" >"$work/out" 2>"$work/err"
    rc=$?
    set -e
    if [ "$rc" -ne "$want" ]; then
        cat "$work/out" "$work/err" >&2
        fail "expected exit $want, got $rc: $*"
    fi
}

expect_out() {
    grep -q -- "$1" "$work/out" "$work/err" || {
        cat "$work/out" "$work/err" >&2
        fail "output lacks '$1'"
    }
}

# flip_byte FILE RECORD [DELTA]: changes a byte in the middle of a log record.
# delete_record FILE RECORD: removes a record frame.
frames_py='
import sys
def frames(d):
    p, out = 16, []
    while p + 8 <= len(d):
        n = int.from_bytes(d[p:p+4], "big"); out.append((p, p + 8 + n)); p += 8 + n
    return out
path, op, i = sys.argv[1], sys.argv[2], int(sys.argv[3])
d = bytearray(open(path, "rb").read()); f = frames(d)
a, b = f[i]
if op == "flip": d[(a + b) // 2] ^= 0x10
elif op == "delete": d = d[:a] + d[b:]
elif op == "cut": d = d[:a + (b - a) // 2]
open(path, "wb").write(d)
'
edit_log() { python3 -c "$frames_py" "$@"; }

d="$work/log"
mkdir "$d"
"$MK" "$d" --records 6 >/dev/null
L="$d/audit.log"
K="$d/aggregator.pub"
RK=(--region-key "ap-south=$d/ap-south.pub" --region-key "eu-west=$d/eu-west.pub"
    --region-key "us-east=$d/us-east.pub")

echo "== verify"
# rounds 2 and 5 have two participants: 4*3 + 2*2 = 16 region signatures
expect_rc 0 "$F" audit verify "$L" --pubkey "$K" "${RK[@]}"
expect_out "^ok: .*: 6 records, 7 signed checkpoints by fedagg.test/audit-it; tree size 6"
expect_out "16 region signatures verified"

cat >"$d/aggregator.textproto" <<'EOF'
federation_id: "audit-it"
tls { cert_file: "tls/agg.crt" key_file: "tls/agg.key" ca_file: "tls/ca.crt" }
regions { id: "ap-south" identity_public_key_file: "ap-south.pub" }
regions { id: "eu-west" identity_public_key_file: "eu-west.pub" }
regions { id: "us-east" identity_public_key_file: "us-east.pub" }
storage { dir: "state" }
audit { signing_key_file: "aggregator.key" origin: "fedagg.test/audit-it" }
EOF
expect_rc 0 "$F" audit verify "$L" --pubkey "$K" --config "$d/aggregator.textproto"
expect_out "16 region signatures verified"

# the key as a C2SP/Go note verifier key, and inline base64
expect_rc 0 "$F" audit key "$d/aggregator.key" --origin fedagg.test/audit-it
vkey=$(sed -n 's/^verifier key: *//p' "$work/out")
[[ "$vkey" == fedagg.test/audit-it+* ]] || fail "bad verifier key '$vkey'"
expect_rc 0 "$F" audit verify "$L" --pubkey "$vkey"
expect_rc 0 "$F" audit verify "$L" --pubkey "$(cat "$K")" --json
python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
s = lines[-1]
assert s["verified"] is True and s["records"] == 6 and s["tree_size"] == 6, s
' "$work/out" || fail "verify --json summary"

# another aggregator's key: no checkpoint verifies
mkdir "$work/other"
"$MK" "$work/other" --key-seed 2 --records 1 >/dev/null
expect_rc 1 "$F" audit verify "$L" --pubkey "$work/other/aggregator.pub"
expect_out "no signature by"
expect_out "^FAILED: "

echo "== show"
expect_rc 0 "$F" audit show "$L"
[ "$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ ' "$work/out")" -eq 6 ] || fail "show: 6 rows expected"
expect_out "6 records; the latest checkpoint signs 6"
expect_rc 0 "$F" audit show "$L" --json
python3 -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["round"] for r in recs] == [1, 2, 3, 4, 5, 6], recs
r = recs[1]
assert r["participants"] == ["ap-south", "eu-west"] and r["dropped"] == ["us-east"], r
assert r["optimizer"]["kind"] == "fedadam" and r["quantization"]["ring_bits"] == 18, r
c = r["commitments"][0]
assert len(c["upload_digest"]) == 64 and c["upload_digest_alg"] == "blake3" and r["signed"] is True, r
assert recs[3]["attempt"] == 1 and recs[3]["commit_time"].endswith("Z"), recs[3]
' "$work/out" || fail "show --json content"
expect_rc 0 "$F" audit show "$L" --json --from 4 --count 1
[ "$(wc -l <"$work/out")" -eq 1 ] || fail "show --from/--count"

echo "== prove / check-proof"
up4=$("$MK" --print-upload eu-west 4)
expect_rc 0 "$F" audit prove "$L" --round 4 --region eu-west -o "$work/p4"
head -1 "$work/p4" | grep -q '^fedagg-audit-proof v1$' || fail "proof file header"
expect_rc 0 "$F" audit check-proof "$work/p4" --pubkey "$K" --region eu-west --upload-digest "$up4" "${RK[@]}"
expect_out "^ok: record 3 (round 4 attempt 1"
expect_out "region eu-west took part with the upload of blake3 $up4"
expect_out "region eu-west: upload commitment signature verified"
# the proof travels alone: check it with no log around
mv "$work/p4" "$work/p4.moved"
expect_rc 0 "$F" audit check-proof "$work/p4.moved" --pubkey "$K"
# another upload, another region, another key, a changed proof: refused
expect_rc 1 "$F" audit check-proof "$work/p4.moved" --pubkey "$K" --region eu-west \
    --upload-digest "$("$MK" --print-upload eu-west 3)"
expect_out "MISMATCH: region eu-west's recorded upload"
expect_rc 1 "$F" audit check-proof "$work/p4.moved" --pubkey "$K" --region mars-1
expect_out "MISMATCH: region mars-1 does not appear"
expect_rc 1 "$F" audit check-proof "$work/p4.moved" --pubkey "$work/other/aggregator.pub"
expect_out "no signature by"
expect_rc 1 "$F" audit check-proof "$work/p4.moved" --pubkey "$K" --region-key "eu-west=$d/us-east.pub"
expect_out "MISMATCH: region eu-west: the upload commitment signature does not verify"
sed 's/^hash ./hash A/' "$work/p4.moved" >"$work/p4.bad"
expect_rc 1 "$F" audit check-proof "$work/p4.bad" --pubkey "$K"
expect_out "inclusion proof does not verify"
# a dropped region's record is provable; it says so
expect_rc 0 "$F" audit prove "$L" --round 5 --region us-east -o "$work/p5"
expect_rc 0 "$F" audit check-proof "$work/p5" --pubkey "$K" --region us-east
expect_out "region us-east is recorded as dropped"
expect_rc 1 "$F" audit prove "$L" --round 99 --region eu-west
expect_out "no record of round 99"

echo "== consistency"
expect_rc 0 "$F" audit checkpoint "$L"
cp "$work/out" "$work/ckpt6"
"$MK" "$d" --records 3 >/dev/null
expect_rc 0 "$F" audit consistency "$work/ckpt6" "$L" --pubkey "$K"
expect_out "^ok: the log fedagg.test/audit-it only grew from 6 to 9 records"
# a history rewritten under the same key, and a shortened one: refused
mkdir "$work/rewritten" "$work/short"
"$MK" "$work/rewritten" --records 9 --variant 1 >/dev/null
expect_rc 1 "$F" audit consistency "$work/ckpt6" "$work/rewritten/audit.log" --pubkey "$K"
expect_out "NOT CONSISTENT: the first 6 records"
expect_rc 0 "$F" audit checkpoint "$L"
cp "$work/out" "$work/ckpt9"
"$MK" "$work/short" --records 7 >/dev/null
expect_rc 1 "$F" audit consistency "$work/ckpt9" "$work/short/audit.log" --pubkey "$K"
expect_out "NOT CONSISTENT: the old checkpoint signs 9 records but the log's latest signs only 7"

echo "== tampering"
cp "$L" "$work/pristine"
edit_log "$L" flip 3
expect_rc 1 "$F" audit verify "$L" --pubkey "$K"
expect_out "^problem: record 3: at offset [0-9]*: checksum mismatch"
expect_out "^FAILED: .*the first at record 3$"
expect_rc 1 "$F" audit show "$L"
expect_out "checksum mismatch"
cp "$work/pristine" "$L"
edit_log "$L" delete 2
expect_rc 1 "$F" audit verify "$L" --pubkey "$K"
expect_out "^FAILED: .*the first at record 2$"
cp "$work/pristine" "$L"
# a crash while the last record was written (before its checkpoint): verify
# names it; the aggregator (here the C API opened for writing) cuts it off
# and the log verifies again
edit_log "$L" cut 8
edit_log "$L.checkpoints" delete 9
expect_rc 1 "$F" audit verify "$L" --pubkey "$K"
expect_out "^problem: record 8: at offset [0-9]*: incomplete"
expect_rc 0 "$F" audit show "$L"
expect_out "a torn last record of"
"$MK" "$d" --records 0 >/dev/null 2>"$work/err" || { cat "$work/err"; fail "reopen after a torn write"; }
grep -q "cut off a torn record" "$work/err" || fail "the torn record was not reported"
expect_rc 0 "$F" audit verify "$L" --pubkey "$K"
expect_out "^ok: .*: 8 records, 9 signed checkpoints"
# a committed record cut short is not a torn write: the writer refuses it
edit_log "$L" cut 7
expect_rc 1 "$F" audit verify "$L" --pubkey "$K"
expect_out "^FAILED: .*the first at record 7$"
"$MK" "$d" --records 0 >/dev/null 2>"$work/err" && fail "a damaged log was opened for writing"
grep -q "record 7 at offset" "$work/err" || { cat "$work/err"; fail "the damaged record was not named"; }

echo "== usage"
expect_rc 2 "$F" audit
expect_rc 2 "$F" audit verify "$L"
expect_rc 2 "$F" audit verify "$L" --pubkey "$K" --bogus
expect_rc 2 "$F" audit frobnicate "$L"
expect_rc 0 "$F" audit --help
expect_out "check-proof"
expect_rc 1 "$F" audit verify "$work/nope.log" --pubkey "$K"
expect_out "No such file"

echo "it_audit_cli: all passed"
