#!/usr/bin/env bash
# A worker SIGKILLed after saving its attempt (its keys sealed in
# attempt.state, its update in the update buffer, which attempt.delta names
# as a second link) and before its masked upload, restarted while the
# masked phase is still open: it resumes that very attempt from what it
# saved, and its update is in the sum.
#  - before the kill, attempt.delta is the update buffer's file (two links),
#    not a copy;
#  - the restarted worker logs "resuming the attempt from saved state";
#  - the quantised input it masks after the restart equals, bit for bit,
#    the one it bound before the kill (FEDAGG_DEBUG_DUMP_DIR);
#  - the round completes with 3 participants; audit and versions check out.
source "$FA_SRC/tests/integration/fedtest.sh"
fed_need_test_hooks

FED_PHASE_MS=30000 fed_test_config 3
fed_start_aggregator "$D"
fed_start_worker "$D" eu-west
fed_start_worker "$D" us-east
victim=ap-south
vlog="$D/logs/worker-$victim.log"
vdir="$D/worker-$victim"
mkdir -p "$D/dump-before" "$D/dump-after"

FEDAGG_DEBUG_DUMP_DIR="$D/dump-before" start_worker_fp "$victim" worker-before-masked
wait_count "$vlog" 'failpoint=worker-before-masked' 1 120
[ -f "$vdir/attempt.state" ] || fail "no attempt.state before the masked upload"
links=$(stat -c %h "$vdir/attempt.delta") || fail "no attempt.delta before the masked upload"
[ "$links" = 2 ] && [ "$(stat -c %i "$vdir/attempt.delta")" = "$(stat -c %i "$vdir/update.f32")" ] ||
    fail "attempt.delta is not the update buffer's file (links $links): the update was copied"
head -c 4096 "$vdir/attempt.delta" | grep -aq '^fedagg-attempt-v1 ' || fail "attempt.delta has no header"
done_before=$(fed_rounds_completed "$D")
kill_worker "$victim"
echo "killed $victim after saving its attempt (attempt.delta: the update buffer, 2 links)"

FEDAGG_DEBUG_DUMP_DIR="$D/dump-after" fed_start_worker "$D" "$victim"
wait_count "$vlog" 'msg="resuming the attempt from saved state"' 1 120
fed_wait_rounds "$D" $((done_before + 1)) 120 || fail "no round completed after the resume"
line=$(round_line $((done_before + 1)))
echo "  $line"
echo "$line" | grep -q "participants=3 " || fail "the resumed region is not in the sum"

before=$(ls "$D/dump-before"/input-$victim-*.u32 2>/dev/null | head -1)
[ -n "$before" ] || fail "no input dumped before the kill"
after="$D/dump-after/$(basename "$before")"
[ -f "$after" ] || fail "the resumed attempt dumped no input named $(basename "$before")"
cmp -s "$before" "$after" || fail "the resumed input differs from the saved one"
echo "resumed input identical to the saved one: $(basename "$before"), $(stat -c %s "$before") bytes"

fed_stop_all
check_audit_and_versions
echo "PASS"
