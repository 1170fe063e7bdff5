#!/usr/bin/env bash
# One dataset, two federations, one differential-privacy budget.  eu-west's
# policy gives its dataset "fmnist" a budget that pays for three of its
# DP-SGD rounds (epsilon 5.2: three rounds cost 4.90, four 5.50); fed-a and
# fed-b, three rounds each, both train on it; us-east and ap-south train
# without DP.  Checks:
#   - every round of eu-west in either federation is charged to the one
#     accountant of the dataset (the agent's), three in all, and the round
#     that would exceed the budget is refused in whichever federation asks
#     (its worker logs "privacy budget exhausted" and sits it out);
#   - both federations complete their rounds (without eu-west once its
#     budget is spent); eu-west is in exactly three rounds of the two audit
#     logs, each with a privacy statement of the dataset's running total;
#   - the agent restarted (SIGTERM, then SIGKILL) reads the same spent
#     budget, to the last digit, and trains no further round.
source "$FA_SRC/tests/integration/fedtest.sh"
source "$FA_SRC/tests/integration/agenttest.sh"
ROUNDS=3
# A round that eu-west sits out waits for its advertisement until the
# deadline: a short one.
AGENT_ROUND='min_regions: 2
  threshold: 2
  advertise_deadline_ms: 20000
  shares_deadline_ms: 20000
  masked_deadline_ms: 20000
  consistency_deadline_ms: 20000
  unmask_deadline_ms: 20000'

agent_service_setup
agent_config eu-west "$(dataset_block fmnist eu-west \
    'privacy { target_epsilon: 5.2 noise_multiplier: 1.2 clip: 1.0 sampling_rate: 0.2 }')
  trainers { name: \"mlp\" builtin { $FED_TRAINER } }
  accept_teams: \"vision\"" "central:$PORT"
for r in us-east ap-south; do
    agent_config "$r" "$(dataset_block fmnist "$r")
  trainers { name: \"mlp\" builtin { $FED_TRAINER } }
  accept_teams: \"vision\"" "central:$PORT"
done
federation_file "$D/fed-a.textproto" fed-a vision mlp fmnist "$ROUNDS"
federation_file "$D/fed-b.textproto" fed-b vision mlp fmnist "$ROUNDS"

service_start central
federation_create central "$D/fed-a.textproto"
federation_create central "$D/fed-b.textproto"
for r in "${REGIONS[@]}"; do agent_start "$r"; done
wait_federation central fed-a finished "$ROUNDS" 400
wait_federation central fed-b finished "$ROUNDS" 400

alog="$D/logs/agent-eu-west.log"
spent=$(fed_count_lines "$alog" 'msg="dataset privacy spent"')
[ "$spent" = 3 ] || fail "eu-west's dataset was charged $spent rounds, not 3"
grep -q 'msg="dataset privacy budget refuses a round"' "$alog" ||
    fail "no round refused by the dataset's budget"
grep -q 'msg="privacy budget exhausted: this region does not train or upload this round".*dataset .fmnist.: privacy budget exhausted' "$alog" ||
    fail "no federation worker sat a round out for the dataset's budget"
grep 'msg="dataset privacy spent"' "$alog" | sed 's/.*\(federation=[^ ]*\).*\(epsilon_total=[^ ]*\).*/  \1 \2/'
grep 'msg="dataset privacy budget refuses a round"' "$alog" | sed 's/.*\(federation=[^ ]*\).*/  refused: \1/' | sort -u
total=$(grep 'msg="dataset privacy spent"' "$alog" | tail -1 | sed 's/.*epsilon_total=\([^ ]*\).*/\1/')

# The audit logs: eu-west in three rounds of the two, with statements of
# the dataset's running total; the two others in every round.
for f in fed-a fed-b; do
    audit_check central "$f"
    "$FA_BIN/fedagg" audit privacy "$D/svc-central/federations/$f/audit.log" --region eu-west \
        --region-key "eu-west=$D/keys/eu-west.pub" --json >"$D/logs/privacy-$f.jsonl" 2>&1 ||
        fail "audit privacy $f: $(cat "$D/logs/privacy-$f.jsonl")"
done
python3 - "$D/logs" "$ROUNDS" "$total" <<'PY' ||
import json, os, sys
logs, eu, top = sys.argv[1], 0, 0.0
for f in ("fed-a", "fed-b"):
    recs = [json.loads(l) for l in open(os.path.join(logs, f"show-{f}.jsonl")) if l.strip()]
    rounds = [r for r in recs if "new_version" in r and not ({"admin", "decision", "lifecycle"} & r.keys())]
    assert len(rounds) == int(sys.argv[2]), f"{f}: {len(rounds)} rounds"
    for r in rounds:
        assert {"us-east", "ap-south"} <= set(r["participants"]), r["participants"]
    n = sum("eu-west" in r["participants"] for r in rounds)
    eu += n
    p = [json.loads(l) for l in open(os.path.join(logs, f"privacy-{f}.jsonl")) if l.strip()]
    assert (p and p[0]["statements"] >= n and p[0]["verified"] == p[0]["statements"]) or n == 0, (f, n, p)
    if p:
        top = max(top, p[0]["epsilon"])
        print(f"{f}: eu-west in {n} rounds, its statements up to epsilon {p[0]['epsilon']:.4f} of "
              f"{p[0]['budget_epsilon']}")
assert eu == 3, f"eu-west in {eu} rounds"
assert abs(top - float(sys.argv[3])) < 1e-3 and top <= 5.2, (top, sys.argv[3])
PY
    fail "the audit logs"

# Restarts keep the spent budget exactly, and train nothing more.
for sig in TERM KILL; do
    agent_kill eu-west "$sig"
    before=$(fed_count_lines "$alog" 'msg="dataset privacy budget" ')
    agent_start eu-west
    wait_count "$alog" 'msg="dataset privacy budget" ' $((before + 1)) 60
    line=$(grep 'msg="dataset privacy budget" ' "$alog" | tail -1)
    echo "after SIG$sig: ${line#*msg=}"
    echo "$line" | grep -q "epsilon_spent=$total .*rounds_accounted=3 " ||
        fail "after SIG$sig the accountant says '$line', not epsilon_spent=$total, 3 rounds"
done
sleep 3
[ "$(fed_count_lines "$alog" 'msg="dataset privacy spent"')" = 3 ] || fail "charged again after a restart"
echo "PASS"
