#!/usr/bin/env bash
# `fedagg config`: check, print, encode, decode -- exit codes and messages as
# an operator sees them.
set -u
bin=${FA_BIN:?FA_BIN not set}
src=${FA_SRC:?FA_SRC not set}
fedagg=$bin/fedagg
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
checks=0

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# expect RC PATTERN -- CMD...: runs CMD, wants exit status RC and stdout+stderr
# matching the extended regex PATTERN (empty: anything).
expect() {
    local want=$1 pat=$2 rc
    shift 3
    "$@" > "$work/out" 2>&1
    rc=$?
    checks=$((checks + 1))
    if [ "$rc" -ne "$want" ]; then
        fail "$* -> exit $rc, expected $want; output:"
        sed 's/^/    /' "$work/out" | head -20
        return 1
    fi
    if [ -n "$pat" ] && ! grep -q -E -- "$pat" "$work/out"; then
        fail "$* -> output does not match /$pat/:"
        sed 's/^/    /' "$work/out" | head -20
        return 1
    fi
    return 0
}

# The files the printed examples name, relative to the config's directory.
make_files() { # DIR
    mkdir -p "$1/tls" "$1/keys" "$1/data" "$1/state"
    touch "$1/tls/aggregator.crt" "$1/tls/aggregator.key" "$1/tls/ca.crt" "$1/keys/audit.key" \
          "$1/tls/eu-west.crt" "$1/tls/eu-west.key" "$1/keys/eu-west.key" \
          "$1/data/train-images-idx3-ubyte.gz" "$1/data/train-labels-idx1-ubyte.gz"
    chmod 600 "$1/tls/aggregator.key" "$1/keys/audit.key" "$1/tls/eu-west.key" "$1/keys/eu-west.key"
    echo "/ia8CzhqF709xSxRVnXl+gbehsB62Xc7aGPYTLxXaVA=" > "$1/keys/us-east.pub"
}

# ---- help, version, usage errors ----
expect 0 'check FILE' -- "$fedagg" config --help
for sub in check print encode decode; do
    expect 0 "^usage: fedagg config $sub" -- "$fedagg" config "$sub" --help
done
expect 0 '^fedagg [0-9]+\.[0-9]+' -- "$fedagg" --version
expect 0 '^fedagg [0-9]+\.[0-9]+' -- "$fedagg" config --version
expect 2 "unknown command 'frobnicate'" -- "$fedagg" config frobnicate
expect 2 'usage: fedagg config COMMAND' -- "$fedagg" config
expect 2 'which file' -- "$fedagg" config check
expect 2 "unknown --type 'bogus'" -- "$fedagg" config check x --type bogus
expect 2 "unknown option '--frob'" -- "$fedagg" config check x --frob
expect 2 'needs --type' -- "$fedagg" config print --defaults
expect 2 'required' -- "$fedagg" config encode
expect 1 'nope.textproto.*(No such file|not found)' -- "$fedagg" config check "$work/nope.textproto" --type worker

# ---- the annotated examples ----
for t in aggregator worker; do
    d=$work/example-$t
    mkdir -p "$d"
    expect 0 '' -- "$fedagg" config print --type $t --defaults
    cp "$work/out" "$d/$t.textproto"
    # commented, complete: the comment of a field deep inside and every top-level field
    grep -q '# Flow-control window of one stream' "$d/$t.textproto" || fail "$t example lacks config.proto comments"
    # without its files: the syntax is fine, and check names each missing file
    expect 0 "OK \($t config, syntax only\)" -- "$fedagg" config check --syntax-only "$d/$t.textproto"
    expect 1 "$t.textproto:[0-9]+:[0-9]+: \`tls.cert_file\`: .*: no such file" -- "$fedagg" config check "$d/$t.textproto"
    expect 0 "OK \($t config" -- "$fedagg" config check --no-files "$d/$t.textproto"
    make_files "$d"
    expect 0 "^$d/$t.textproto: OK \($t config" -- "$fedagg" config check "$d/$t.textproto"
    # the type is guessed from the fields
    expect 0 "OK \($t config" -- "$fedagg" config check "$d/$t.textproto" --type "$t"
    # encode is byte-identical to protoc --encode; decode reads back
    type=fedagg.AggregatorConfig
    [ $t = worker ] && type=fedagg.WorkerConfig
    if command -v protoc > /dev/null; then
        protoc --proto_path="$src/proto" --encode=$type config.proto < "$d/$t.textproto" > "$work/protoc.bin"
        "$fedagg" config encode --type $t < "$d/$t.textproto" > "$work/ours.bin" || fail "encode $t example"
        cmp -s "$work/protoc.bin" "$work/ours.bin" || fail "$t example: fedagg config encode differs from protoc --encode"
        protoc --proto_path="$src/proto" --decode=$type config.proto < "$work/ours.bin" > /dev/null 2>&1 ||
            fail "$t example: protoc cannot decode our encoding"
    fi
    "$fedagg" config encode --type $t < "$d/$t.textproto" > "$work/a.bin"
    "$fedagg" config decode --type $t < "$work/a.bin" > "$work/decoded.textproto" || fail "decode $t"
    "$fedagg" config encode --type $t < "$work/decoded.textproto" > "$work/b.bin"
    cmp -s "$work/a.bin" "$work/b.bin" || fail "$t: encode | decode | encode changed the bytes"
done
expect 1 'not a valid binary fedagg.WorkerConfig' -- bash -c "printf '\\377\\377\\377' | '$fedagg' config decode --type worker"
expect 1 '^<stdin>:1:1: unknown field `bogus` in fedagg.WorkerConfig' -- bash -c "echo 'bogus: 1' | '$fedagg' config encode --type worker"

# ---- relative paths are relative to the config's directory, not the cwd ----
d=$work/example-aggregator
expect 0 'OK \(aggregator config' -- bash -c "cd / && '$fedagg' config check '$d/aggregator.textproto'"
expect 0 'OK \(aggregator config' -- bash -c "cd '$d' && '$fedagg' config check aggregator.textproto"
# effective config: defaults filled in, paths absolute
expect 0 '' -- "$fedagg" config print "$d/aggregator.textproto"
grep -q "cert_file: \"$d/tls/aggregator.crt\"" "$work/out" || fail "print FILE: paths not absolute"
grep -q 'threshold: 2' "$work/out" || fail "print FILE: threshold 0 not shown as the majority (2 of 3)"
grep -q "log_file: \"$d/state/audit.log\"" "$work/out" || fail "print FILE: audit.log_file default missing"

# ---- key files must be private ----
chmod 644 "$d/keys/audit.key"
expect 1 'aggregator.textproto:[0-9]+:[0-9]+: `audit.signing_key_file`: .*accessible by group or others \(mode 644\); run: chmod 600' -- \
    "$fedagg" config check "$d/aggregator.textproto"
chmod 600 "$d/keys/audit.key"

# ---- meaning errors, every one with file:line:column ----
cat > "$d/bad.textproto" <<'EOF'
# a broken aggregator config
tls { cert_file: "tls/aggregator.crt" key_file: "tls/aggregator.key" ca_file: "tls/ca.crt" }
regions { id: "EU_West" identity_public_key: "oFWVhDaDAZZtgHvg7ilgXh8sAdxQpshwkkkLKKvpH8k=" }
regions { id: "us-east" identity_public_key_file: "keys/us-east.pub" }
regions { id: "us-east" identity_public_key: "c2hvcnQ=" }
round {
  min_regions: 4
  threshold: 5
  masked_deadline_ms: 0
}
quantization { bits: 25 }
optimizer { kind: FEDADAM beta2: 1.5 }
storage { dir: "state" }
audit { signing_key_file: "keys/audit.key" }
EOF
expect 1 '' -- "$fedagg" config check "$d/bad.textproto"
for want in \
    'bad.textproto:3:11: `regions\[0\].id` "EU_West" is not a region id' \
    'bad.textproto:5:11: `regions\[2\].id`: region "us-east" is listed twice \(first at 4:11\)' \
    'bad.textproto:5:25: `regions\[2\].identity_public_key`: decodes to 5 bytes' \
    'bad.textproto:7:3: `round.min_regions` \(4\) exceeds the number of regions \(3\)' \
    'bad.textproto:8:3: `round.threshold` \(5\) exceeds the number of regions \(3\); use 1..3, or 0 for a majority' \
    'bad.textproto:9:3: `round.masked_deadline_ms` must be positive' \
    'bad.textproto:11:16: `quantization.bits` \(25\) must be from 2 to 24' \
    'bad.textproto:12:27: `optimizer.beta2` \(1.5\) must be in \[0, 1\)' \
    'bad.textproto: 8 errors \(aggregator config\)'; do
    grep -q -E -- "$want" "$work/out" || fail "bad.textproto: no line matching /$want/ in:" "$(cat "$work/out")"
done

# ---- syntax errors: all of them, with a suggestion ----
printf 'round {\n  min_region: 2\n  treshold: 1\n}\nstorage { dir: "s" keep_versions: -1 }\n' > "$d/typo.textproto"
expect 1 'typo.textproto:2:3: unknown field `round.min_region` in fedagg.RoundPolicy; did you mean `min_regions`\?' -- \
    "$fedagg" config check --type aggregator "$d/typo.textproto"
grep -q 'typo.textproto:3:3: unknown field `round.treshold` in fedagg.RoundPolicy; did you mean `threshold`?' "$work/out" ||
    fail "second syntax error not reported"
grep -q 'typo.textproto:5:35: `storage.keep_versions` (uint32) cannot be negative' "$work/out" ||
    fail "third syntax error not reported"

# ---- worker: the trainer must be chosen; the type cannot always be guessed ----
cat > "$d/w.textproto" <<'EOF'
region_id: "eu-west"
aggregator: "[::1]:4433"
tls { cert_file: "tls/eu-west.crt" key_file: "tls/eu-west.key" ca_file: "tls/ca.crt" }
identity_key_file: "keys/eu-west.key"
state_dir: "state"
compression { topk_fraction: 0 }
EOF
expect 1 'w.textproto:1:1: `trainer`: set one of `builtin' -- "$fedagg" config check "$d/w.textproto"
grep -q 'w.textproto:6:15: `compression.topk_fraction` (0) must be in (0, 1]' "$work/out" || fail "topk_fraction range"
grep -q 'w.textproto:1:1: `regions`: list at least one region' "$work/out" || fail "worker without regions"
echo 'regions { id: "us-east" identity_public_key_file: "keys/us-east.pub" }' >> "$d/w.textproto"
expect 1 'w.textproto:1:1: `region_id` "eu-west" is not in `regions`' -- "$fedagg" config check "$d/w.textproto"
echo '# nothing here' > "$d/empty.textproto"
expect 1 'empty.textproto:1:1: cannot tell whether this is an aggregator or a worker config' -- \
    "$fedagg" config check "$d/empty.textproto"

echo "config CLI: $checks commands checked, $fails failures"
[ "$fails" -eq 0 ]
