#!/usr/bin/env bash
# One agent per region in federations on two aggregation services at once
# (two aggregator processes, each with its own federations, pinned by its
# key in the agents' configs; the same signing key here).  Each service
# hosts one federation ("fed-x" on both: a federation is named by its
# service and its id, and each has a state directory of its own under
# federations/<service>/<id>).  Checks: both complete with all three
# regions; the agents list both services and keep their state apart; an
# unreachable service (the second one stopped mid-way) is backed off and
# does not disturb the federation on the other.
source "$FA_SRC/tests/integration/fedtest.sh"
source "$FA_SRC/tests/integration/agenttest.sh"
ROUNDS=2

FED_ALPHA=0.5 FED_SEED=3 fed_setup "$D" "${REGIONS[@]}"
agent_pki
P1=$(fed_free_port udp)
M1=$(fed_free_port tcp)
P2=$(fed_free_port udp)
M2=$(fed_free_port tcp)
service_config central "$P1" "$M1"
service_config lab "$P2" "$M2"
operator_config central "$P1"
operator_config lab "$P2"
for r in "${REGIONS[@]}"; do
    agent_config "$r" "$(dataset_block fmnist "$r")
  trainers { name: \"mlp\" builtin { $FED_TRAINER } }
  accept_teams: \"vision\"" "central:$P1" "lab:$P2"
done
federation_file "$D/fed-x.textproto" fed-x vision mlp fmnist "$ROUNDS"

service_start central
service_start lab
federation_create central "$D/fed-x.textproto"
federation_create lab "$D/fed-x.textproto"
for r in "${REGIONS[@]}"; do agent_start "$r"; done
wait_federation central fed-x finished "$ROUNDS" 300
wait_federation lab fed-x finished "$ROUNDS" 300
for s in central lab; do
    audit_check "$s" fed-x
    python3 - "$D/logs/show-fed-x.jsonl" "$s" <<'PY' || fail "$s: the audit log"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rounds = [r for r in recs if "new_version" in r and not ({"admin", "decision", "lifecycle"} & r.keys())]
assert len(rounds) == 2, f"{len(rounds)} rounds"
for r in rounds:
    assert sorted(r["participants"]) == ["ap-south", "eu-west", "us-east"], r["participants"]
print(f"{sys.argv[2]}: fed-x, {len(rounds)} rounds with the three regions")
PY
    for r in "${REGIONS[@]}"; do
        [ -f "$D/agent-$r/federations/$s/fed-x/worker.textproto" ] ||
            fail "$r has no state directory for fed-x on $s"
        d=$(region_decision "$s" fed-x "$r")
        [ "${d%% *}" = accepted ] || fail "$s fed-x: $r's decision is '$d'"
    done
done

# The lab service goes away: the agents back off their listings of it and
# go on with a federation created on the other.
kill -TERM "$(service_pid lab)"
wait "$(service_pid lab)" 2>/dev/null || true
federation_file "$D/fed-y.textproto" fed-y vision mlp fmnist 1
federation_create central "$D/fed-y.textproto"
wait_federation central fed-y finished 1 300
for r in "${REGIONS[@]}"; do
    grep -q 'msg="cannot list the service.s federations; trying again later"' "$D/logs/agent-$r.log" ||
        fail "$r did not notice the lab service was gone"
done
echo "PASS"
