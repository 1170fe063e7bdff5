#!/usr/bin/env bash
# The aggregator's paths match exactly and their numbers are strict: a
# region's requests for paths that only begin like one of the API's
# (/v1/federationX), for versions written with a sign, leading zeros, in
# hex or past 2^53 (/v1/models/-1 and /v1/models/18446744073709551615 were
# "latest"), or for rounds so written, get 404 (400 for a query), and no
# error body names a path of the server's files.  The API's own paths still
# answer.  An aggregator alone: no round has to run.
source "$FA_SRC/tests/integration/fedtest.sh"

fed_test_config 0
fed_start_aggregator "$D"
wait_log "$D/logs/aggregator.log" 'msg="aggregator serving"' 60

n=0
# probe WANT get|post PATH [ARGS...] : the status must be WANT; the body of
# an error must not name this test's directory (where the state lives).
probe() {
    local want=$1 verb=$2 path=$3 out body
    shift 3
    n=$((n + 1))
    body="$D/body-$n.bin"
    if [ "$verb" = get ]; then
        out=$("$FA_BIN/fedagg-h3" get --server "127.0.0.1:$PORT" --name localhost \
            --ca "$D/pki/ca.crt" --cert "$D/pki/client-eu-west.crt" \
            --key "$D/pki/client-eu-west.key" "$path" --out "$body" "$@" 2>>"$D/logs/h3.log")
    else
        : >"$body"
        out=$("$FA_BIN/fedagg-h3" post --quiet-body --server "127.0.0.1:$PORT" --name localhost \
            --ca "$D/pki/ca.crt" --cert "$D/pki/client-eu-west.crt" \
            --key "$D/pki/client-eu-west.key" "$path" --in "$body" "$@" 2>>"$D/logs/h3.log")
    fi
    echo "$out" | grep -q "\"status\":$want[,}]" || fail "$verb $path: expected $want, got: $out"
    if [ "$want" != 200 ] && [ "$verb" = get ] && grep -q -- "$D" "$body"; then
        fail "$verb $path: the error names a server path: $(tr -c '[:print:]' ' ' <"$body")"
    fi
    echo "ok: $verb $path -> $want"
}

# The API's own paths.
probe 200 get /v1/federation
probe 200 get /v1/status
probe 200 get /v1/models/latest
probe 200 get /v1/models/0
probe 200 get /v1/audit/checkpoint
# Prefixes of them are not them.
probe 404 get /v1/federationX
probe 404 get /v1/federation/
probe 404 get /v1/statusX
probe 404 get /v1/models/latestX
probe 404 get /v1/audit/checkpointX
probe 404 post /v1/evaluationsX
probe 404 post /v1/privacyX
probe 404 post /v1/rounds/1/0/advertiseX
# Numbers: digits only, no sign, no leading zero, at most 2^53 - 1.
for v in -1 +0 00 0x1 18446744073709551615 18446744073709551616 9007199254740992 1.0 1e3; do
    probe 404 get "/v1/models/$v"
done
probe 404 get /v1/models/9007199254740991 # in range, never made: not retained
probe 404 post /v1/rounds/+1/0/advertise
probe 404 post /v1/rounds/1/-0/advertise
probe 404 post /v1/rounds/01/0/advertise
probe 404 post /v1/rounds/1/4294967296/advertise
probe 400 get '/v1/audit/record?version=+0'
probe 400 get '/v1/audit/proof?round=-1&region=eu-west'
probe 400 get '/v1/audit/consistency?from=0&to=1e3'
probe 400 get '/v1/models/0?delta_from=-1'
# A round in range is a path the API takes: the (empty) message itself is
# then refused, for naming no region.
probe 403 post /v1/rounds/9007199254740991/4294967294/advertise
# The aggregator is still serving.
probe 200 get /v1/federation
echo "PASS"
