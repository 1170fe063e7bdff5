#!/usr/bin/env bash
# Two federations at once on one aggregation service with the same three
# regions: the default federation of today's config runs while an operator
# creates a second one (no restart of anything), whose evaluator command
# crashes on every version; both complete rounds, each sum equals the plain
# sum of its regions' quantised inputs bit for bit, and each audit log,
# the service log included, verifies.  Then a third
# federation is paused, resumed, aborted and archived while the default
# one's rounds go on untouched; archived, no region reaches it.  An
# operator of another team gets 403 on every action on a federation not
# his, logged; the metrics carry each federation's label.
source "$FA_SRC/tests/integration/servicetest.sh"
fed_need_test_hooks # the sums and inputs dumped (FEDAGG_DEBUG_DUMP_DIR)

agg="$D/logs/aggregator.log"
SVC_BLOCK='evaluators { name: "crash" command: ["/bin/sh", "-c", "kill -SEGV $$"] }' svc_config 0
mkdir -p "$D/dump/demo"
FEDAGG_DEBUG_DUMP_DIR="$D/dump/{federation}" fed_start_aggregator "$D"
agg_pid=$FED_AGG_PID
for r in "${REGIONS[@]}"; do
    FEDAGG_DEBUG_DUMP_DIR="$D/dump/demo" fed_start_worker "$D" "$r"
done
svc_wait_rounds demo 1 120

# --- a second federation, created while the first runs ---------------------------
svc_fed_file beta vision 3 'description: "the same data, a narrower model" evaluator: "crash"'
"$FA_BIN/fedagg" config check --type federation --no-files "$D/beta.textproto" >"$D/check.out" 2>&1 ||
    fail "config check: $(cat "$D/check.out")"
svc_op alice federation create "$D/beta.textproto" >"$D/create.out" 2>&1 ||
    fail "create: $(cat "$D/create.out")"
grep -q "federation beta created by alice" "$D/create.out" || fail "create: $(cat "$D/create.out")"
# a file with a mistake: refused at its line and column, nothing made
printf 'federation_id: "bad"\nteam: "vision"\nregions { id: "eu-west" identity_public_key_file: "../keys/eu-west.pub" }\nround { threshold: 4 }\n' >"$D/bad.textproto"
! svc_op alice federation create "$D/bad.textproto" >"$D/bad.out" 2>&1 || fail "a bad file was created"
grep -q "bad.textproto:4:9: \`round.threshold\` (4) exceeds the number of regions (1)" "$D/bad.out" ||
    fail "bad file: $(cat "$D/bad.out")"
# a file naming a key the service does not have: the service's own check
svc_fed_file nokey vision 1
sed -i 's|../keys/us-east.pub|../keys/nowhere.pub|' "$D/nokey.textproto"
! svc_op alice federation create "$D/nokey.textproto" >"$D/nokey.out" 2>&1 || fail "nokey created"
grep -q 'nokey.textproto:4:25: .regions\[1\].identity_public_key_file.: .*nowhere.pub: No such file' "$D/nokey.out" ||
    fail "nokey: $(cat "$D/nokey.out")"
[ ! -e "$D/svc/federations/nokey" ] || fail "a refused federation left a directory"

svc_start_workers beta
svc_wait_rounds beta 3 240
d_before=$(svc_rounds demo)
svc_wait_rounds demo $((d_before + 1)) 120
kill -0 "$agg_pid" || fail "the aggregator is not the one started first"
[ "$(grep -c 'msg="aggregator serving"' "$agg")" = 1 ] || fail "the aggregator restarted"
for r in "${REGIONS[@]}"; do
    wait_log "$D/logs/worker-beta-$r.log" 'msg="the federation has finished"' 60
    c=$(grep -c 'msg="round done".*proof=verified' "$D/logs/worker-beta-$r.log" || true)
    [ "$c" -ge 2 ] || fail "beta: $r proved $c rounds"
done
# its evaluator crashed, in its federation only: logged, its rounds went on
grep -q 'msg="evaluator command failed" proc=aggregator federation=beta ' "$agg" ||
    fail "beta's evaluator did not crash in beta's scope"
! grep -q 'msg="evaluator command failed" proc=aggregator federation=demo ' "$agg" ||
    fail "an evaluator failed in demo"
svc_op alice federation list >"$D/list.out" || fail "list: $(cat "$D/list.out")"
grep -qE '^beta +vision +finished ' "$D/list.out" || fail "list: $(cat "$D/list.out")"
grep -qE '^demo +vision +running .*\(default\)' "$D/list.out" || fail "list: $(cat "$D/list.out")"
echo "beta: 3 rounds beside demo's $(svc_rounds demo); $(svc_check_sums "$D/dump/beta")"

# --- a third one: its lifecycle leaves the default one untouched ------------------
svc_fed_file gamma vision 0
svc_op alice federation create "$D/gamma.textproto" >/dev/null || fail "create gamma"
svc_start_workers gamma
svc_wait_rounds gamma 1 180
svc_op alice federation pause gamma >"$D/pause.out" || fail "pause: $(cat "$D/pause.out")"
grep -q "paused by alice" "$D/pause.out" || fail "pause: $(cat "$D/pause.out")"
g0=$(svc_rounds gamma)
d0=$(svc_rounds demo)
svc_wait_rounds demo $((d0 + 2)) 120
g1=$(svc_rounds gamma)
[ "$g1" -le $((g0 + 1)) ] || fail "gamma ran $((g1 - g0)) rounds while paused"
svc_op alice federation show gamma >"$D/show.out" || fail "show gamma"
grep -q '^state *paused' "$D/show.out" || fail "show: $(cat "$D/show.out")"
svc_op alice federation resume gamma >/dev/null || fail "resume gamma"
svc_wait_rounds gamma $((g1 + 1)) 120
svc_op alice federation abort gamma >"$D/abort.out" || fail "abort: $(cat "$D/abort.out")"
grep -q "federation gamma aborted by alice" "$D/abort.out" || fail "abort: $(cat "$D/abort.out")"
g2=$(svc_rounds gamma)
d0=$(svc_rounds demo)
svc_wait_rounds demo $((d0 + 2)) 120
[ "$(svc_rounds gamma)" -le $((g2 + 1)) ] || fail "gamma ran rounds after its abort"
svc_op alice federation show gamma >"$D/show.out"
grep -q '^state *stopped: aborted by operator alice' "$D/show.out" || fail "show: $(cat "$D/show.out")"
! svc_op alice federation resume gamma >"$D/resume.out" 2>&1 || fail "an aborted federation resumed"
grep -q "does not resume" "$D/resume.out" || fail "resume: $(cat "$D/resume.out")"
svc_op alice federation archive gamma >/dev/null || fail "archive gamma"
svc_stop_workers gamma
# archived: no region reaches it, nor sees it offered
svc_h3 eu-west get "/v1/federations/gamma/federation" --out "$D/g.bin" >"$D/g.out" 2>&1
grep -q '"status":404' "$D/g.out" || fail "archived gamma: $(cat "$D/g.out")"
grep -q "no federation 'gamma' for region eu-west" "$D/g.bin" || fail "archived gamma: $(cat "$D/g.bin")"
svc_h3 eu-west get /v1/federations --out "$D/offers.bin" >/dev/null 2>&1 || fail "GET /v1/federations"
protoc --decode=fedagg.FederationList -I "$FA_SRC/proto" "$FA_SRC/proto/fedagg.proto" \
    <"$D/offers.bin" >"$D/offers.txt"
grep -q 'federation_id: "demo"' "$D/offers.txt" && grep -q 'federation_id: "beta"' "$D/offers.txt" ||
    fail "offers: $(cat "$D/offers.txt")"
! grep -q gamma "$D/offers.txt" || fail "an archived federation is offered"
grep -q 'state: "finished"' "$D/offers.txt" || fail "offers: no finished beta"
svc_h3 us-east get /v1/status --header "accept: application/json" --out "$D/status.json" \
    >/dev/null 2>&1 || fail "GET /v1/status"
python3 - "$D/status.json" <<'PY' || fail "status: $(cat "$D/status.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["federation_id"] == "demo" and s["federations"] == ["demo", "beta"], s
PY

# --- another team's operator: 403 on every action, each logged ---------------------
for id in demo beta gamma; do
    for cmd in "federation show $id" "federation pause $id" "federation resume $id" \
        "federation abort $id" "federation archive $id" "status --federation $id" \
        "rounds --federation $id" "regions --federation $id" "models --federation $id" \
        "audit-head --federation $id" "pause --federation $id" "abort --federation $id" \
        "drain eu-west --federation $id" "admit eu-west --federation $id" \
        "models governance --federation $id" "model card 1 --federation $id" \
        "models release 1 --channel prod --federation $id" "models rollback --federation $id"; do
        # shellcheck disable=SC2086
        if svc_op bob $cmd >"$D/bob.out" 2>&1; then fail "bob: $cmd succeeded"; fi
        grep -q "answered 403: operator bob (teams: nlp) may not touch federation $id of team \"vision\"" "$D/bob.out" ||
            fail "bob: $cmd: $(cat "$D/bob.out")"
    done
done
svc_op bob status >"$D/bob.out" 2>&1 && fail "bob read the default federation"
grep -q "answered 403" "$D/bob.out" || fail "bob status: $(cat "$D/bob.out")"
! svc_op bob federation create "$D/beta.textproto" >"$D/bob.out" 2>&1 || fail "bob created"
grep -q "may not create federations of team \"vision\"" "$D/bob.out" || fail "bob create: $(cat "$D/bob.out")"
svc_op bob federation list >"$D/bob-list.out" || fail "bob list"
grep -q "no federation of your teams" "$D/bob-list.out" || fail "bob list: $(cat "$D/bob-list.out")"
n403=$(grep -c 'msg="admin request refused" proc=aggregator operator=bob' "$agg" || true)
[ "$n403" -ge 55 ] || fail "only $n403 of bob's refusals logged"
# the promotion gate's documents are each federation's (off here)
svc_op alice models governance --federation beta >"$D/gov-beta.out" 2>&1 ||
    fail "governance of beta: $(cat "$D/gov-beta.out")"

# --- metrics carry each federation ---------------------------------------------------
curl -sf "http://127.0.0.1:$MPORT/metrics" >"$D/metrics.txt" || fail "GET /metrics"
for want in 'fedagg_model_version{federation="beta"} 3' \
    'fedagg_federation_state{federation="gamma",state="archived"} 1' \
    'fedagg_federation_state{federation="demo",state="running"} 1' \
    'fedagg_federation_state{federation="beta",state="finished"} 1' \
    'fedagg_rounds_total{federation="beta",outcome="completed"} 3' \
    'fedagg_paused{federation="demo"} 0'; do
    grep -qF "$want" "$D/metrics.txt" || fail "metrics lack '$want'"
done
grep -q '^fedagg_region_rounds_total{federation="demo",region="eu-west"} [1-9]' "$D/metrics.txt" ||
    fail "no demo region rounds"

# --- the dashboard shows every federation -----------------------------------------------
curl -sf "http://127.0.0.1:$MPORT/dashboard" >"$D/dashboard.html" || fail "GET /dashboard"
for want in '<table id="federations">' '<a href="#f1">beta</a>' '<a href="#f2">gamma</a>' \
    'state-archived">archived</span>' 'id="f1-regions"'; do
    grep -qF "$want" "$D/dashboard.html" || fail "the dashboard lacks '$want'"
done

# --- every log verifies; every sum is the plain sum ---------------------------------
fed_stop_all
svc_check_sums "$D/dump/demo"
svc_verify_log "$D/state/audit.log" --config "$D/aggregator.textproto"
keys=()
for r in "${REGIONS[@]}"; do keys+=(--region-key "$r=$D/keys/$r.pub"); done
svc_verify_log "$D/svc/federations/beta/audit.log" "${keys[@]}"
svc_verify_log "$D/svc/federations/gamma/audit.log" "${keys[@]}"
svc_verify_log "$D/svc/service.log"
"$FA_BIN/fedagg" audit show "$D/svc/service.log" --json >"$D/service-log.jsonl" || fail "audit show"
python3 - "$D/service-log.jsonl" <<'PY' || fail "service log: $(cat "$D/service-log.jsonl")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
got = [(r["federation"], r["lifecycle"]["action"], r["lifecycle"]["operator"]) for r in recs]
want = [("beta", "create", "alice"), ("gamma", "create", "alice"), ("gamma", "pause", "alice"),
        ("gamma", "resume", "alice"), ("gamma", "abort", "alice"), ("gamma", "archive", "alice")]
assert got == want, got
assert "federation_id: \"beta\"" in recs[0]["lifecycle"]["config"]
PY
! grep -h 'level=error' "$D"/logs/*.log || fail "errors in the logs"
echo "PASS"
