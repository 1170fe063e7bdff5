#!/usr/bin/env bash
# Model files are safetensors only (docs/governance.md): a file PyTorch's
# torch.save wrote (a zip archive holding a pickle, and the legacy pickle of
# _use_new_zipfile_serialization=False) and a plain pickle.dump are refused
# by their content, whatever their name, with a message that says what
# they are, wherever fedagg reads a model, and nothing is written:
#   - `fedagg model inspect`, `convert` (no output file appears), `diff`;
#   - the aggregator's model.init_file (it does not start; its storage holds
#     no model, manifest or audit log);
#   - an external trainer's output (the region skips the round, its update
#     never leaves; the others' rounds complete without it).
source "$FA_SRC/tests/integration/fedtest.sh"

F="$FA_BIN/fedagg"
TPY=$(fed_torch_python) || { echo "SKIP: $(fed_torch_python 2>&1)"; exit 77; }
"$TPY" - "$D" <<'PY' || fail "cannot write the torch.save files"
import pickle, sys, torch
d = sys.argv[1]
sd = {"fc1.weight": torch.zeros(10, 784), "fc1.bias": torch.zeros(10)}
torch.save(sd, d + "/zip.pt")
torch.save(sd, d + "/legacy.pt", _use_new_zipfile_serialization=False)
with open(d + "/plain.pkl", "wb") as f:
    pickle.dump({"fc1.weight": [0.0] * 4}, f, protocol=4)
# a name that hides it
torch.save(sd, d + "/disguised.safetensors")
PY
head -c 2 "$D/zip.pt" | grep -q PK || fail "torch.save did not write a zip"

expect_refused() { # FILE WHAT
    local rc=0
    "$F" model inspect "$1" >"$D/out" 2>&1 || rc=$?
    [ "$rc" = 1 ] || fail "inspect $1: exit $rc: $(cat "$D/out")"
    grep -q "$(basename "$1") is $2" "$D/out" || fail "inspect $1 said: $(cat "$D/out")"
    grep -q "safetensors only" "$D/out" || fail "inspect $1 said: $(cat "$D/out")"
}
expect_refused "$D/zip.pt" "a zip archive (torch.save"
expect_refused "$D/legacy.pt" "a Python pickle (torch.save's legacy format"
expect_refused "$D/plain.pkl" "a Python pickle"
expect_refused "$D/disguised.safetensors" "a zip archive"

rc=0
"$F" model convert "$D/zip.pt" "$D/converted.safetensors" --dtype bf16 >"$D/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "convert of a torch.save file: exit $rc: $(cat "$D/out")"
grep -q "zip.pt is a zip archive" "$D/out" || fail "convert said: $(cat "$D/out")"
[ ! -e "$D/converted.safetensors" ] || fail "convert wrote an output"
ls "$D" | grep -q "converted.safetensors" && fail "convert left a temporary file: $(ls "$D")"
rc=0
"$F" model diff "$D/legacy.pt" "$D/zip.pt" >"$D/out" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "pickle" "$D/out" || fail "diff of two torch.save files: exit $rc: $(cat "$D/out")"

# --- init_file -----------------------------------------------------------
fed_test_config 3
sed -i "s|^model { .* }|model { init_file: \"$D/legacy.pt\" }|" "$D/aggregator.textproto"
grep -q "init_file" "$D/aggregator.textproto" || fail "init_file not set"
rc=0
timeout 60 "$FA_BIN/fedagg-aggregator" --config "$D/aggregator.textproto" >"$D/logs/agg-init.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "the aggregator started on a pickle init_file (exit $rc): $(tail -3 "$D/logs/agg-init.log")"
grep -q "legacy.pt is a Python pickle" "$D/logs/agg-init.log" || fail "aggregator said: $(tail -3 "$D/logs/agg-init.log")"
left=$(find "$D/state" -type f | wc -l)
[ "$left" = 0 ] || fail "the refused start wrote into the storage: $(find "$D/state" -type f)"

# --- an external trainer's output ---------------------------------------------
fed_write_aggregator "$D" "$PORT" "$MPORT" 2 "${REGIONS[@]}"
cat >"$D/pickle_trainer.py" <<'PY'
# A trainer that answers with a torch.save file.
import sys, torch
torch.save({"fc1.weight": torch.zeros(1)}, sys.argv[2])
PY
FED_WORKER_TRAINER="external { command: [\"$TPY\", \"$D/pickle_trainer.py\", \"{input}\", \"{output}\"] timeout_s: 120 }" \
    fed_write_worker "$D" eu-west "$PORT" "$ALL"
fed_start_aggregator "$D"
for r in "${REGIONS[@]}"; do fed_start_worker "$D" "$r"; done
fed_wait_rounds "$D" 2 180 || fail "the rounds did not complete without eu-west"
wait_log "$D/logs/worker-eu-west.log" "is a zip archive (torch.save" 30
grep -q "local round failed; this region skips the round" "$D/logs/worker-eu-west.log" ||
    fail "eu-west did not skip the round: $(grep -i error "$D/logs/worker-eu-west.log" | tail -2)"
grep -q "masked upload received.*region=eu-west" "$D/logs/aggregator.log" &&
    fail "eu-west uploaded an update made from a pickle"
round_line 1 | grep -q 'participants=2' || fail "round 1: $(round_line 1)"
echo "PASS"
