#!/usr/bin/env bash
# bench-round-setup.sh - the files a `fedagg-bench round` federation needs,
# made the way an operator makes them (deploy/fedlib.sh does the same for the
# demo and the tests):
#
#   bench-round-setup.sh DIR BIN_DIR REGION[,REGION...] [--split ALPHA SEED]
#
#   DIR/pki/          federation CA, aggregator and region certificates (deploy/pki.sh)
#   DIR/keys/         Ed25519 identity keys of the regions and the audit signing key
#                     (`fedagg keygen`)
#   DIR/data/<region>/  with --split: Fashion-MNIST cut into non-IID shards,
#                     Dirichlet(ALPHA), seed SEED (`fedagg data split`)
#
# Idempotent for an existing DIR.  Prints nothing on success; on failure the
# tool's output goes to stderr and the exit status is 1.
set -euo pipefail

[ $# -ge 3 ] || { echo "usage: $0 DIR BIN_DIR REGIONS_CSV [--split ALPHA SEED]" >&2; exit 2; }
dir=$1
bin=$2
csv=$3
shift 3
src=$(cd "$(dirname "$0")/.." && pwd)
IFS=, read -r -a regions <<<"$csv"

mkdir -p "$dir/keys" "$dir/logs"
"$src/deploy/pki.sh" "$dir/pki" --regions "$csv" >"$dir/logs/pki.log" 2>&1 ||
    { cat "$dir/logs/pki.log" >&2; exit 1; }
for r in "${regions[@]}" aggregator; do
    [ -f "$dir/keys/$r.key" ] || "$bin/fedagg" keygen --out "$dir/keys/$r" >/dev/null ||
        { echo "fedagg keygen $r failed" >&2; exit 1; }
done
if [ "${1:-}" = "--split" ] && [ ! -f "$dir/data/manifest.json" ]; then
    "$bin/fedagg" data split --regions "${#regions[@]}" --alpha "$2" --seed "$3" \
        --out "$dir/data" --names "$csv" >"$dir/logs/split.log" 2>&1 ||
        { cat "$dir/logs/split.log" >&2; exit 1; }
fi
