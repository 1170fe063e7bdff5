#!/usr/bin/env bash
# SIGKILL of a region agent while its federations are in their masked
# phase: nothing is lost.  Two federations (fed-a, fed-b) that need all
# three regions (threshold 3); eu-west's agent runs with the failpoint
# worker-before-masked, so both of its federation workers stop after saving
# their attempt and before their masked upload.  Then:
#   - the agent is SIGKILLed: its federation workers die with it (the
#     kernel's parent-death signal), nothing of eu-west keeps running;
#   - the agent restarted (without the failpoint) starts both workers
#     again, each resumes its saved attempt ("resuming the attempt from
#     saved state"), and round 1 of both federations completes in its first
#     attempt with all three regions; both finish, their audit logs verify.
source "$FA_SRC/tests/integration/fedtest.sh"
source "$FA_SRC/tests/integration/agenttest.sh"
ROUNDS=2
AGENT_ROUND='min_regions: 3
  threshold: 3
  advertise_deadline_ms: 60000
  shares_deadline_ms: 30000
  masked_deadline_ms: 90000
  consistency_deadline_ms: 30000
  unmask_deadline_ms: 30000'

agent_service_setup
for r in "${REGIONS[@]}"; do
    agent_config "$r" "$(dataset_block fmnist "$r")
  trainers { name: \"mlp\" builtin { $FED_TRAINER } }
  accept_teams: \"vision\"" "central:$PORT"
done
federation_file "$D/fed-a.textproto" fed-a vision mlp fmnist "$ROUNDS"
federation_file "$D/fed-b.textproto" fed-b vision mlp fmnist "$ROUNDS"

service_start central
federation_create central "$D/fed-a.textproto"
federation_create central "$D/fed-b.textproto"
agent_start us-east
agent_start ap-south
agent_start eu-west FEDAGG_FAILPOINTS=worker-before-masked
alog="$D/logs/agent-eu-west.log"
wait_count "$alog" 'failpoint=worker-before-masked' 2 180
for f in fed-a fed-b; do
    [ -f "$D/agent-eu-west/federations/central/$f/attempt.state" ] || fail "$f: no saved attempt"
done
workers=$(pgrep -f "$D/agent-eu-west/federations/central/.*/worker.textproto" | wc -l)
[ "$workers" = 2 ] || fail "$workers federation workers of eu-west before the kill, not 2"

agent_kill eu-west KILL
echo "SIGKILLed eu-west's agent with both federations before their masked upload"
start=$SECONDS
while pgrep -f "$D/agent-eu-west/federations/central/.*/worker.textproto" >/dev/null; do
    [ $((SECONDS - start)) -lt 10 ] || fail "eu-west's federation workers outlived their agent"
    sleep 0.2
done

agent_start eu-west
wait_count "$alog" 'msg="resuming the attempt from saved state"' 2 120
for f in fed-a fed-b; do
    grep -q "msg=\"resuming the attempt from saved state\".*federation=$f" "$alog" ||
        fail "$f did not resume its attempt"
done
for f in fed-a fed-b; do
    wait_federation central "$f" finished "$ROUNDS" 300
    audit_check central "$f"
    python3 - "$D/logs/show-$f.jsonl" "$f" <<'PY' || fail "$f: the audit log"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rounds = [r for r in recs if "new_version" in r and not ({"admin", "decision", "lifecycle"} & r.keys())]
first = rounds[0]
assert first["round"] == 1 and first["attempt"] == 0, first
for r in rounds:
    assert sorted(r["participants"]) == ["ap-south", "eu-west", "us-east"], r
print(f"{sys.argv[2]}: round 1 completed in attempt 0 with all three; {len(rounds)} rounds")
PY
done
echo "PASS"
