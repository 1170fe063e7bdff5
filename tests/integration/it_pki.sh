#!/usr/bin/env bash
# deploy/pki.sh: the chain verifies with OpenSSL and GnuTLS (openssl verify,
# certtool --verify) for the right purposes and names, SAN URIs and CNs name
# the regions, keys are P-256 and mode 0600, reruns change nothing, and the
# bad certificates of --test-extras fail for the reason they were made for.
# Finally GnuTLS itself (gnutls-serv / gnutls-cli, TLS 1.3 only) accepts a
# region's certificate for client authentication and refuses the bad ones.
set -euo pipefail
: "${FA_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
PKI="$FA_SRC/deploy/pki.sh"
TMP=$(mktemp -d /tmp/it_pki.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in openssl certtool gnutls-serv gnutls-cli python3; do
    command -v "$tool" >/dev/null || fail "$tool not installed (deploy/install-deps.sh)"
done

D="$TMP/pki"
REGIONS=(eu-west us-east ap-south)
"$PKI" "$D" --regions eu-west,us-east,ap-south --aggregator-name agg.example.org --test-extras \
    >"$TMP/run1.log"

# --- files, modes, key type -----------------------------------------------------
mode() { stat -c %a "$1"; }
keys=("$D/ca.key" "$D/server.key")
certs=("$D/ca.crt" "$D/server.crt")
for id in "${REGIONS[@]}"; do
    keys+=("$D/client-$id.key")
    certs+=("$D/client-$id.crt")
done
for x in other-ca client-other-ca client-expired server-wrong-name client-unknown client-cn-only; do
    keys+=("$D/test/$x.key")
    certs+=("$D/test/$x.crt")
done
for k in "${keys[@]}"; do
    [ "$(mode "$k")" = 600 ] || fail "$k has mode $(mode "$k"), want 600"
    openssl pkey -in "$k" -noout -text 2>/dev/null | grep -q "NIST CURVE: P-256" || fail "$k is not a P-256 key"
done
for c in "${certs[@]}"; do
    [ "$(mode "$c")" = 644 ] || fail "$c has mode $(mode "$c"), want 644"
    openssl x509 -in "$c" -noout -text | grep -q "ecdsa-with-SHA256" || fail "$c not signed with ECDSA/SHA-256"
done

# --- OpenSSL: chain, purpose, names ----------------------------------------------
ov() { openssl verify -CAfile "$D/ca.crt" "$@" >"$TMP/ov.log" 2>&1; }
ov -x509_strict -purpose sslserver -verify_hostname localhost "$D/server.crt" || fail "server.crt: $(cat "$TMP/ov.log")"
ov -purpose sslserver -verify_hostname agg.example.org "$D/server.crt" || fail "server.crt (agg.example.org): $(cat "$TMP/ov.log")"
ov -purpose sslserver -verify_ip 127.0.0.1 "$D/server.crt" || fail "server.crt (127.0.0.1): $(cat "$TMP/ov.log")"
ov -purpose sslserver -verify_hostname other.example.org "$D/server.crt" && fail "server.crt verified for a name it does not carry"
ov -x509_strict "$D/ca.crt" || fail "ca.crt: $(cat "$TMP/ov.log")"
for id in "${REGIONS[@]}"; do
    c="$D/client-$id.crt"
    ov -x509_strict -purpose sslclient "$c" || fail "$c: $(cat "$TMP/ov.log")"
    ov -purpose sslserver "$c" && fail "$c is accepted as a server certificate"
    san=$(openssl x509 -in "$c" -noout -ext subjectAltName | tail -n +2 | sed 's/^ *//')
    [ "$san" = "URI:fedagg://region/$id" ] || fail "$c: SAN '$san', want URI:fedagg://region/$id"
    cn=$(openssl x509 -in "$c" -noout -subject -nameopt RFC2253 | sed 's/^subject=//')
    [[ "$cn" == "CN=$id,"* ]] || fail "$c: subject '$cn' does not start with CN=$id"
done
openssl x509 -in "$D/ca.crt" -noout -ext basicConstraints | grep -q "CA:TRUE" || fail "ca.crt is not a CA"
openssl x509 -in "$D/client-eu-west.crt" -noout -ext basicConstraints | grep -q "CA:FALSE" || fail "client certificate may sign"
# The bad ones, each for its own reason.
ov "$D/test/client-other-ca.crt" && fail "a certificate from another CA verified"
grep -q "unable to get local issuer" "$TMP/ov.log" || fail "other CA: $(cat "$TMP/ov.log")"
openssl verify -CAfile "$D/test/other-ca.crt" "$D/test/client-other-ca.crt" >/dev/null || fail "client-other-ca does not chain to other-ca"
ov -purpose sslclient "$D/test/client-expired.crt" && fail "the expired certificate verified"
grep -q "certificate has expired" "$TMP/ov.log" || fail "expired: $(cat "$TMP/ov.log")"
ov -no_check_time -purpose sslclient "$D/test/client-expired.crt" || fail "expired certificate not issued by the federation CA"
ov -purpose sslserver -verify_hostname localhost "$D/test/server-wrong-name.crt" && fail "wrong-name server certificate verified for localhost"
grep -q "hostname mismatch" "$TMP/ov.log" || fail "wrong name: $(cat "$TMP/ov.log")"
ov -purpose sslclient "$D/test/client-unknown.crt" || fail "client-unknown should be a valid certificate of an unknown region"
openssl x509 -in "$D/test/client-unknown.crt" -noout -ext subjectAltName | grep -q "URI:fedagg://region/unknown-region" || fail "client-unknown SAN"
ov -purpose sslclient "$D/test/client-cn-only.crt" || fail "client-cn-only: $(cat "$TMP/ov.log")"
openssl x509 -in "$D/test/client-cn-only.crt" -noout -ext subjectAltName 2>/dev/null | grep -q URI && fail "client-cn-only has a SAN URI"

# --- GnuTLS certtool ----------------------------------------------------------------
CLIENT_AUTH=1.3.6.1.5.5.7.3.2
SERVER_AUTH=1.3.6.1.5.5.7.3.1
ct() { certtool --verify --verify-profile medium --load-ca-certificate "$D/ca.crt" "$@" >"$TMP/ct.log" 2>&1; }
ct --verify-purpose "$SERVER_AUTH" --verify-hostname localhost --infile "$D/server.crt" || fail "certtool server.crt: $(cat "$TMP/ct.log")"
ct --verify-purpose "$SERVER_AUTH" --verify-hostname agg.example.org --infile "$D/server.crt" || fail "certtool server.crt agg.example.org"
for id in "${REGIONS[@]}"; do
    ct --verify-purpose "$CLIENT_AUTH" --infile "$D/client-$id.crt" || fail "certtool client-$id.crt: $(cat "$TMP/ct.log")"
    ct --verify-purpose "$SERVER_AUTH" --infile "$D/client-$id.crt" && fail "certtool accepted client-$id.crt for serverAuth"
done
ct --verify-purpose "$CLIENT_AUTH" --infile "$D/test/client-other-ca.crt" && fail "certtool accepted another CA's certificate"
ct --verify-purpose "$CLIENT_AUTH" --infile "$D/test/client-expired.crt" && fail "certtool accepted the expired certificate"
grep -q "expired" "$TMP/ct.log" || fail "certtool expired: $(cat "$TMP/ct.log")"
ct --verify-purpose "$SERVER_AUTH" --verify-hostname localhost --infile "$D/test/server-wrong-name.crt" && fail "certtool accepted the wrong name"
grep -q "does not match" "$TMP/ct.log" || fail "certtool wrong name: $(cat "$TMP/ct.log")"

# --- idempotent, keys never replaced, stale certificates reissued ------------------------
sums() { (cd "$D" && find . -type f | sort | xargs md5sum); }
sums >"$TMP/sum1"
"$PKI" "$D" --regions eu-west,us-east,ap-south --aggregator-name agg.example.org --test-extras >"$TMP/run2.log"
sums | diff "$TMP/sum1" - >/dev/null || fail "a second run changed files"
grep -q "nothing changed" "$TMP/run2.log" || fail "second run: $(cat "$TMP/run2.log")"
# A new region: only its files appear.
"$PKI" "$D" --regions eu-west,us-east,ap-south,sa-east --aggregator-name agg.example.org --test-extras >"$TMP/run3.log"
sums | grep -v client-sa-east | diff "$TMP/sum1" - >/dev/null || fail "adding a region changed other files"
if [ ! -s "$D/client-sa-east.crt" ] || [ "$(mode "$D/client-sa-east.key")" != 600 ]; then fail "sa-east not made"; fi
# A lost certificate is reissued with the same key; a loosened key mode is fixed.
pub_before=$(openssl pkey -in "$D/client-us-east.key" -pubout)
rm "$D/client-us-east.crt"
chmod 0644 "$D/client-eu-west.key"
"$PKI" "$D" --regions eu-west,us-east >"$TMP/run4.log"
[ "$(openssl x509 -in "$D/client-us-east.crt" -noout -pubkey)" = "$pub_before" ] || fail "reissued certificate has another key"
[ "$(mode "$D/client-eu-west.key")" = 600 ] || fail "key mode not restored to 0600"
# A certificate that no longer chains to the CA (e.g. copied from another PKI) is reissued.
cp "$D/test/client-other-ca.crt" "$D/client-eu-west.crt"
cp "$D/test/client-other-ca.key" "$TMP/other.key"
"$PKI" "$D" --regions eu-west >/dev/null
ov -purpose sslclient "$D/client-eu-west.crt" || fail "stale certificate not reissued"
# --force replaces keys.
ca_before=$(md5sum <"$D/ca.key")
"$PKI" "$D" --regions eu-west --force >/dev/null
[ "$(md5sum <"$D/ca.key")" != "$ca_before" ] || fail "--force kept the CA key"
ov -purpose sslclient "$D/client-eu-west.crt" || fail "after --force: $(cat "$TMP/ov.log")"
# Bad input: a clear message, exit 1, nothing written.
for bad in "Eu-West" "eu_west" "-eu" "eu west" "../x"; do
    "$PKI" "$TMP/bad" --regions "$bad" >"$TMP/bad.log" 2>&1 && fail "region id '$bad' accepted"
    grep -q "region id" "$TMP/bad.log" || fail "no clear message for '$bad': $(cat "$TMP/bad.log")"
done
[ ! -e "$TMP/bad" ] || fail "a refused run created its directory"
"$PKI" "$TMP/bad" >/dev/null 2>&1 && fail "--regions is not required"
"$PKI" "$TMP/bad" --regions eu --aggregator-name 'a b' >/dev/null 2>&1 && fail "a bad aggregator name was accepted"
"$PKI" --help | grep -q -- "--test-extras" || fail "--help"

# --- GnuTLS TLS 1.3 mutual authentication ---------------------------------------------------
"$PKI" "$D" --regions eu-west,us-east,ap-south --test-extras >/dev/null # fresh extras for the new CA
PRIO='NORMAL:-VERS-ALL:+VERS-TLS1.3'
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_server() { # CERT KEY
    PORT=$(free_port)
    gnutls-serv --echo -p "$PORT" --x509certfile "$1" --x509keyfile "$2" --x509cafile "$D/ca.crt" \
        --require-client-cert --verify-client-cert --priority "$PRIO" >"$TMP/serv.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
        sleep 0.05
    done
    fail "gnutls-serv did not start: $(cat "$TMP/serv.log")"
}
handshake() { # HOST CERT KEY -> 0 when the echo came back through a verified mutual-TLS session
    local out
    out=$(echo "fedagg-$RANDOM" | timeout 10 gnutls-cli -p "$PORT" "$1" --x509cafile "$D/ca.crt" \
        --x509certfile "$2" --x509keyfile "$3" --priority "$PRIO" 2>&1) || { echo "$out" >"$TMP/cli.log"; return 1; }
    echo "$out" >"$TMP/cli.log"
    grep -q "(TLS1.3-X.509)" "$TMP/cli.log" && grep -q "^fedagg-" "$TMP/cli.log"
}
start_server "$D/server.crt" "$D/server.key"
for id in "${REGIONS[@]}"; do
    handshake localhost "$D/client-$id.crt" "$D/client-$id.key" || fail "TLS 1.3 with client-$id: $(cat "$TMP/cli.log")"
done
handshake localhost "$D/test/client-other-ca.crt" "$D/test/client-other-ca.key" && fail "server accepted another CA's client"
grep -q "Access was denied" "$TMP/cli.log" || fail "other-CA refusal unclear: $(cat "$TMP/cli.log")"
handshake localhost "$D/test/client-expired.crt" "$D/test/client-expired.key" && fail "server accepted an expired client"
grep -q "Access was denied" "$TMP/cli.log" || fail "expired refusal unclear: $(cat "$TMP/cli.log")"
# (the refusals came from a server that still serves good clients)
handshake localhost "$D/client-eu-west.crt" "$D/client-eu-west.key" || fail "server gone after refusals"
kill "${PIDS[-1]}"
start_server "$D/test/server-wrong-name.crt" "$D/test/server-wrong-name.key"
handshake localhost "$D/client-eu-west.crt" "$D/client-eu-west.key" && fail "client accepted a server certificate for another name"
grep -qi "does not match" "$TMP/cli.log" || fail "wrong-name refusal unclear: $(cat "$TMP/cli.log")"
echo "it_pki: ok"
