#!/usr/bin/env bash
# Differential test of our text-format parser and printer against protoc 3.21
# (`protoc --encode/--decode`, package protobuf-compiler) as the oracle, over
# the corpus in tests/textformat/.  Each corpus file names its message type
# on its first line (`# message: fatest.All`).
#
#   valid/     protoc and we both accept it, and
#              - our binary encoding equals protoc's, byte for byte;
#              - our printed text, read by protoc, encodes to the same bytes
#                (the printer writes text protoc understands identically);
#              - our printed text, read by us, encodes to the same bytes;
#              - protoc's binary decoded by us and printed reads back the same.
#   invalid/   protoc and we both reject it; our first error contains the
#              `# error:` line of the file (file:line:col and wording), and
#              every error line has the form file:line:col: message.
#   stricter/  we reject on purpose what protoc accepts (a `# protoc:` line
#              says why); we check that protoc still accepts it, so that the
#              list stays true.
# Then 300 seeded random edits of the corpus go through both
# (tests/textformat/mutate_diff.py): same verdict, same bytes.
set -u
src=${FA_SRC:?FA_SRC not set}
build=${FA_BUILD:?FA_BUILD not set}
tf=$build/tests/tf_encode
corpus=$src/tests/textformat

if ! command -v protoc > /dev/null; then
    echo "FAIL: protoc not installed (package protobuf-compiler; run deploy/install-deps.sh)"
    exit 1
fi
[ -x "$tf" ] || { echo "FAIL: $tf not built"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
nvalid=0 ninvalid=0 nstrict=0

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

header() { # header FILE KEY -> value of the `# KEY: value` line
    grep -a -m1 "^# $2: " "$1" | sed "s/^# $2: //"
}

protoc_for() { # protoc arguments for a message type
    case $1 in
    fatest3.*) echo "--proto_path=$corpus testmsg3.proto" ;;
    fatest.*) echo "--proto_path=$corpus testmsg.proto" ;;
    fedagg.*) echo "--proto_path=$src/proto config.proto" ;;
    esac
}

for f in "$corpus"/valid/*.txtpb; do
    name=valid/$(basename "$f")
    type=$(header "$f" message)
    # shellcheck disable=SC2046
    if ! protoc --encode="$type" $(protoc_for "$type") < "$f" > "$work/protoc.bin" 2> "$work/protoc.err"; then
        fail "$name: protoc rejects a file of the valid corpus: $(head -3 "$work/protoc.err")"
        continue
    fi
    if ! "$tf" "$type" "$f" > "$work/ours.bin" 2> "$work/ours.err"; then
        fail "$name: we reject what protoc accepts: $(head -3 "$work/ours.err")"
        continue
    fi
    if ! cmp -s "$work/protoc.bin" "$work/ours.bin"; then
        fail "$name: encoding differs from protoc's"
        echo "  protoc: $(od -An -tx1 "$work/protoc.bin" | head -3 | tr -s ' \n' ' ')"
        echo "  ours:   $(od -An -tx1 "$work/ours.bin" | head -3 | tr -s ' \n' ' ')"
        continue
    fi
    if ! "$tf" --print "$type" "$f" > "$work/printed.txt" 2> "$work/ours.err"; then
        fail "$name: printing failed: $(head -3 "$work/ours.err")"
        continue
    fi
    # shellcheck disable=SC2046
    if ! protoc --encode="$type" $(protoc_for "$type") < "$work/printed.txt" > "$work/protoc2.bin" 2> "$work/protoc.err" ||
        ! cmp -s "$work/protoc.bin" "$work/protoc2.bin"; then
        fail "$name: protoc reads our printed text differently: $(head -3 "$work/protoc.err")"
        continue
    fi
    if ! "$tf" "$type" "$work/printed.txt" > "$work/ours2.bin" 2> "$work/ours.err" ||
        ! cmp -s "$work/protoc.bin" "$work/ours2.bin"; then
        fail "$name: our printed text does not read back to the same message: $(head -3 "$work/ours.err")"
        continue
    fi
    if ! "$tf" --decode "$type" < "$work/protoc.bin" > "$work/decoded.txt" 2> "$work/ours.err" ||
        ! "$tf" "$type" "$work/decoded.txt" > "$work/ours3.bin" 2>> "$work/ours.err" ||
        ! cmp -s "$work/protoc.bin" "$work/ours3.bin"; then
        fail "$name: protoc's binary, decoded and printed by us, does not read back: $(head -3 "$work/ours.err")"
        continue
    fi
    nvalid=$((nvalid + 1))
done

check_rejected() { # FILE NAME -> 0 when we reject it with the expected first error
    local f=$1 name=$2 type want first
    type=$(header "$f" message)
    want=$(header "$f" error)
    if "$tf" "$type" "$f" > /dev/null 2> "$work/ours.err"; then
        fail "$name: we accept it"
        return 1
    fi
    first=$(head -1 "$work/ours.err")
    if [ -z "$want" ] || [[ "$first" != *"$want"* ]]; then
        fail "$name: first error is \"$first\"; expected it to contain \"$want\""
        return 1
    fi
    if grep -a -v -q -E "^$f:[0-9]+:[0-9]+: " "$work/ours.err"; then
        fail "$name: an error line is not file:line:col: message: $(grep -a -v -E "^$f:[0-9]+:[0-9]+: " "$work/ours.err" | head -1)"
        return 1
    fi
    return 0
}

for f in "$corpus"/invalid/*.txtpb; do
    name=invalid/$(basename "$f")
    type=$(header "$f" message)
    # shellcheck disable=SC2046
    if protoc --encode="$type" $(protoc_for "$type") < "$f" > /dev/null 2>&1; then
        fail "$name: protoc accepts a file of the invalid corpus"
        continue
    fi
    check_rejected "$f" "$name" && ninvalid=$((ninvalid + 1))
done

for f in "$corpus"/stricter/*.txtpb; do
    name=stricter/$(basename "$f")
    type=$(header "$f" message)
    # shellcheck disable=SC2046
    if ! protoc --encode="$type" $(protoc_for "$type") < "$f" > /dev/null 2>&1; then
        fail "$name: protoc now rejects it too; move it to invalid/"
        continue
    fi
    check_rejected "$f" "$name" && nstrict=$((nstrict + 1))
done

# The multi-error file: every error is reported, not only the first.
f=$corpus/invalid/several_errors.txtpb
"$tf" fatest.All "$f" > /dev/null 2> "$work/several.err"
if [ "$(wc -l < "$work/several.err")" -ne 3 ]; then
    fail "invalid/several_errors.txtpb: expected 3 errors, got:"
    cat "$work/several.err"
fi

# Random edits of the corpus (seeded: the same 300 inputs every run).
if command -v python3 > /dev/null; then
    python3 "$corpus/mutate_diff.py" "$corpus" "$tf" "$src/proto" 20261130 300 || fail "mutation differential"
else
    fail "python3 not installed (deploy/install-deps.sh installs it)"
fi

echo "textformat vs protoc: $nvalid valid, $ninvalid invalid, $nstrict stricter files agree; $fails failures"
[ "$fails" -eq 0 ]
