#!/usr/bin/env bash
# Revoking a region's certificate while the federation runs: the CA's
# operator revokes ap-south with `openssl ca -revoke` and writes a CRL with
# `openssl ca -gencrl`, renames it over the aggregator's tls.crl_file and
# sends SIGHUP.  The aggregator loads it, closes ap-south's connection and
# refuses its handshakes (its worker stops on the TLS refusal), the other
# two regions go on.  A CRL signed by another CA is then refused and the
# previous one stays in force; removing the revocation lets ap-south in
# again without a restart (the file polled, no signal).
source "$FA_SRC/tests/integration/fedtest.sh"

"$FA_SRC/deploy/pki.sh" "$D/pki" --regions "$ALL" --test-extras >/dev/null 2>&1 ||
    fail "pki.sh --test-extras"
# the CA's database and an empty CRL (openssl ca), before the aggregator starts
mkdir -p "$D/ca"
: >"$D/ca/index.txt"
echo 01 >"$D/ca/crlnumber"
cat >"$D/ca/ca.cnf" <<EOF
[ca]
default_ca = fed
[fed]
database = $D/ca/index.txt
crlnumber = $D/ca/crlnumber
default_md = sha256
default_crl_days = 30
EOF
gencrl() { # CA_CRT CA_KEY: a CRL into crl.pem, by rename
    openssl ca -config "$D/ca/ca.cnf" -gencrl -cert "$1" -keyfile "$2" -out "$D/crl.pem.new" \
        >>"$D/logs/openssl.log" 2>&1 || fail "openssl ca -gencrl: $(tail -3 "$D/logs/openssl.log")"
    mv "$D/crl.pem.new" "$D/crl.pem"
}
mkdir -p "$D/logs"
gencrl "$D/pki/ca.crt" "$D/pki/ca.key"
export FED_AGG_EXTRA=''
fed_test_config 100000
# the CRL goes into the aggregator's tls block
sed -i 's|^  ca_file: "pki/ca.crt"$|  ca_file: "pki/ca.crt"\n  crl_file: "crl.pem"|' "$D/aggregator.textproto"
grep -q 'crl_file: "crl.pem"' "$D/aggregator.textproto" || fail "no crl_file in the config"
"$FA_BIN/fedagg" config check "$D/aggregator.textproto" >"$D/check.out" 2>&1 ||
    fail "config check: $(cat "$D/check.out")"

fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 1 240 || fail "the first round did not complete"
wait_log "$D/logs/aggregator.log" 'msg="connection established" proc=aggregator peer=ap-south' 30

# --- revoke ap-south -----------------------------------------------------------
openssl ca -config "$D/ca/ca.cnf" -revoke "$D/pki/client-ap-south.crt" -cert "$D/pki/ca.crt" \
    -keyfile "$D/pki/ca.key" >>"$D/logs/openssl.log" 2>&1 || fail "openssl ca -revoke"
gencrl "$D/pki/ca.crt" "$D/pki/ca.key"
kill -HUP "$FED_AGG_PID"
wait_log "$D/logs/aggregator.log" 'msg="CRL loaded"' 10
wait_log "$D/logs/aggregator.log" 'msg="connection of a revoked certificate closed" proc=aggregator peer=ap-south' 10
# ap-south's worker is refused in the handshake, and stops
apid=$(fed_worker_pid ap-south)
for _ in $(seq 1 150); do kill -0 "$apid" 2>/dev/null || break; sleep 0.2; done
kill -0 "$apid" 2>/dev/null && fail "ap-south's worker still runs with a revoked certificate"
grep -q 'reason="client certificate .* is revoked (serial ' "$D/logs/aggregator.log" ||
    fail "the refusal does not say the certificate is revoked"
# the two others go on
n=$(fed_rounds_completed "$D")
fed_wait_rounds "$D" $((n + 2)) 240 || fail "no rounds after the revocation"
round_line $((n + 2)) | grep -q ' participants=2 ' || fail "round $((n + 2)): $(round_line $((n + 2)))"

# --- a CRL from another CA is refused; the previous one stays ----------------------
gencrl "$D/pki/test/other-ca.crt" "$D/pki/test/other-ca.key"
wait_log "$D/logs/aggregator.log" 'msg="CRL not reloaded; the previous one stays in force"' 10
rc=0
"$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
    --cert "$D/pki/client-ap-south.crt" --key "$D/pki/client-ap-south.key" /v1/federation \
    >"$D/h3.out" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "ap-south connected while the previous CRL revokes it"

# --- lifted: a new CRL without it, found by the poll (no signal) --------------------
: >"$D/ca/index.txt"
gencrl "$D/pki/ca.crt" "$D/pki/ca.key"
ok=0
for _ in $(seq 1 40); do
    if "$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost --ca "$D/pki/ca.crt" \
        --cert "$D/pki/client-ap-south.crt" --key "$D/pki/client-ap-south.key" /v1/federation \
        >"$D/h3.out" 2>&1; then
        ok=1
        break
    fi
    sleep 0.25
done
[ "$ok" = 1 ] || fail "ap-south still refused after the revocation was lifted: $(cat "$D/h3.out")"
[ "$(grep -c 'msg="CRL loaded"' "$D/logs/aggregator.log")" -ge 2 ] || fail "the poll did not load the CRL"
check_audit_and_versions
echo "OK: revoked, refused, rounds went on, lifted"
