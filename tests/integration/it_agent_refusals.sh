#!/usr/bin/env bash
# A region's policy refuses federations, each for its reason, and they run
# without it.  One aggregation service, three federations created at run
# time (docs/service.md), one long-lived agent per region (docs/region-
# policy.md).  eu-west and us-east accept all three; ap-south's policy
# refuses each:
#   f-trainer  names trainer "mlp-wide", which ap-south's policy lacks
#   f-model    a model of about 100 KB; ap-south takes at most 50,000 bytes
#   f-team     of team "finance", which ap-south does not accept
# Checks: each refusal is signed, recorded centrally with its reason
# (`fedagg federation show`) and in the federation's audit log; each
# federation completes its rounds with the two other regions; the agents
# share their one device (the built-in trainer) between the federations;
# ap-south starts no federation worker; the audit logs verify.
source "$FA_SRC/tests/integration/fedtest.sh"
source "$FA_SRC/tests/integration/agenttest.sh"
ROUNDS=2

agent_service_setup

both="$(dataset_block fmnist @R@)
  trainers { name: \"mlp\" builtin { $FED_TRAINER } }
  trainers { name: \"mlp-wide\" builtin { $FED_TRAINER } }
  accept_teams: [\"vision\", \"finance\"]"
for r in eu-west us-east; do
    agent_config "$r" "${both//@R@/$r}" "central:$PORT"
done
agent_config ap-south "$(dataset_block fmnist ap-south)
  trainers { name: \"mlp\" builtin { $FED_TRAINER } }
  accept_teams: [\"vision\"]
  max_model_bytes: 50000" "central:$PORT"

federation_file "$D/f-trainer.textproto" f-trainer vision mlp-wide fmnist "$ROUNDS"
federation_file "$D/f-model.textproto" f-model vision mlp fmnist "$ROUNDS"
federation_file "$D/f-team.textproto" f-team finance mlp fmnist "$ROUNDS"

service_start central
for f in f-trainer f-model f-team; do federation_create central "$D/$f.textproto"; done
for r in "${REGIONS[@]}"; do agent_start "$r"; done

# Each refusal, with its reason, as the central operators see it.
expect_refusal() { # ID WORDS
    local start=$SECONDS d
    until d=$(region_decision central "$1" ap-south) && [ "${d%% *}" = refused ]; do
        [ $((SECONDS - start)) -lt 60 ] || fail "$1: ap-south's decision is '$d'"
        sleep 1
    done
    case "$d" in *"$2"*) ;; *) fail "$1: refused with '$d', not '$2'" ;; esac
    echo "$1: ap-south $d"
}
expect_refusal f-trainer "unknown trainer: the region's policy has no trainer 'mlp-wide'"
expect_refusal f-model "model too large"
expect_refusal f-team "team 'finance' is not among its accept_teams"

for f in f-trainer f-model f-team; do
    wait_federation central "$f" finished "$ROUNDS" 300
    for r in eu-west us-east; do
        d=$(region_decision central "$f" "$r")
        [ "${d%% *}" = accepted ] || fail "$f: $r's decision is '$d'"
    done
done

# The federations ran without ap-south: every round with the two others.
for f in f-trainer f-model f-team; do
    audit_check central "$f"
    python3 - "$D/logs/show-$f.jsonl" "$f" "$ROUNDS" <<'PY' || fail "$f: the audit log"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rounds = [r for r in recs if "new_version" in r and not ({"admin", "decision", "lifecycle"} & r.keys())]
decisions = {r["decision"]["region"]: r["decision"] for r in recs if "decision" in r}
assert len(rounds) == int(sys.argv[3]), f"{len(rounds)} rounds"
for r in rounds:
    assert sorted(r["participants"]) == ["eu-west", "us-east"], r["participants"]
assert not decisions["ap-south"]["accept"] and decisions["ap-south"]["reason"], decisions
assert decisions["eu-west"]["accept"] and decisions["us-east"]["accept"], decisions
print(f"{sys.argv[2]}: {len(rounds)} rounds of eu-west and us-east; ap-south refused: "
      f"{decisions['ap-south']['reason']}")
PY
done

# ap-south ran no federation worker; the others one per federation, and
# their trainings took turns on the one device.
! grep -q 'msg="federation worker started"' "$D/logs/agent-ap-south.log" ||
    fail "ap-south started a federation worker"
for r in eu-west us-east; do
    [ "$(fed_count_lines "$D/logs/agent-$r.log" 'msg="federation worker started"')" -ge 3 ] ||
        fail "$r did not start three federation workers"
    grep -q 'msg="device granted by the region agent"' "$D/logs/agent-$r.log" ||
        fail "$r's workers did not ask for the device"
done
! grep -h 'level=error' "$D"/logs/agent-*.log || fail "errors in the agents' logs"
echo "PASS"
