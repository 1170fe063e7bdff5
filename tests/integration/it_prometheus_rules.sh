#!/usr/bin/env bash
# The shipped monitoring: deploy/prometheus/fedagg-rules.yml passes
# `promtool check rules` and its unit tests (`promtool test rules`), the
# example prometheus.yml passes `promtool check config`; every alert has a
# severity and a summary; and the rules and the Grafana dashboard
# (deploy/grafana/fedagg-dashboard.json: valid JSON, every panel with a
# query) name only metrics that the aggregator or the worker export (taken
# from their code) and recording rules that the rules file defines.
# (`promtool check metrics` on a live /metrics is in it_dashboard.sh.)
set -euo pipefail
: "${FA_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
if ! command -v promtool >/dev/null; then
    echo "SKIP: promtool is not installed (Debian's prometheus package: deploy/install-deps.sh)"
    exit 77
fi
fail() {
    echo "FAIL: $*" >&2
    exit 1
}
P="$FA_SRC/deploy/prometheus"
G="$FA_SRC/deploy/grafana/fedagg-dashboard.json"
TMP=$(mktemp -d /tmp/it_prom.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

promtool check rules "$P/fedagg-rules.yml" >"$TMP/check.out" 2>&1 || fail "check rules: $(cat "$TMP/check.out")"
(cd "$P" && promtool test rules fedagg-rules.test.yml) >"$TMP/test.out" 2>&1 ||
    fail "promtool test rules: $(cat "$TMP/test.out")"
grep -q SUCCESS "$TMP/test.out" || fail "promtool test rules: $(cat "$TMP/test.out")"
promtool check config "$P/prometheus.yml" >"$TMP/config.out" 2>&1 || fail "check config: $(cat "$TMP/config.out")"

# The metric families the code exports: the names the aggregator defines
# (fa_metrics_define) and the worker writes (worker_metrics.c).
grep -rhoE '"fedagg_[a-z0-9_]+"' "$FA_SRC/aggregator" "$FA_SRC/worker" --include='*.c' |
    tr -d '"' | sort -u >"$TMP/exported.txt"
[ "$(wc -l <"$TMP/exported.txt")" -ge 40 ] || fail "only $(wc -l <"$TMP/exported.txt") metric names found in the code"
grep -qx fedagg_tls_certificate_expiry_timestamp_seconds "$TMP/exported.txt" || fail "no certificate expiry metric in the code"

python3 - "$P/fedagg-rules.yml" "$G" "$TMP/exported.txt" <<'PY' || fail "rules or dashboard name what we do not export"
import json, re, sys
import yaml

rules_path, dash_path, exported_path = sys.argv[1:]
exported = set(open(exported_path).read().split())
suffixes = ("_bucket", "_sum", "_count")
rules = yaml.safe_load(open(rules_path))
records = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
assert len(alerts) >= 8 and len(records) >= 5, (len(alerts), len(records))
names = {a["alert"] for a in alerts}
for want in ("FedaggFederationStalled", "FedaggRegionMissingRounds", "FedaggAbortRateHigh",
             "FedaggStorageNearlyFull", "FedaggStorageBlocked", "FedaggNotReady",
             "FedaggCertificateExpiresSoon"):
    assert want in names, f"no alert {want}"
for a in alerts:
    assert a.get("labels", {}).get("severity") in ("critical", "warning", "info"), a["alert"]
    assert a.get("annotations", {}).get("summary"), a["alert"]

NAME = re.compile(r"\bfedagg[_:][a-zA-Z0-9_:]*")
STRINGS = re.compile(r'"[^"]*"')
def check(expr, where):
    bad = []
    # label values and matchers ("completed") are no metric names
    for n in NAME.findall(STRINGS.sub('""', expr)):
        if ":" in n:
            if n not in records:
                bad.append(n + " (no such recording rule)")
        elif n not in exported and not any(n.endswith(s) and n[: -len(s)] in exported for s in suffixes):
            bad.append(n)
    assert not bad, f"{where}: {bad} in {expr!r}"
    return len(NAME.findall(expr))

count = 0
for g in rules["groups"]:
    for r in g["rules"]:
        count += check(r["expr"], r.get("record") or r.get("alert"))
dash = json.load(open(dash_path))
assert dash.get("uid") and dash.get("title") and dash.get("panels"), "dashboard without uid, title or panels"
panels = [p for p in dash["panels"] if p.get("type") != "row"]
assert len(panels) >= 10, len(panels)
for p in panels:
    assert p.get("targets"), f"panel {p.get('title')} has no query"
    for t in p["targets"]:
        count += check(t["expr"], f"panel {p['title']!r}")
for v in dash.get("templating", {}).get("list", []):
    if v.get("type") == "query":
        check(v["query"], f"variable {v['name']}")
ids = [p["id"] for p in dash["panels"]]
assert len(ids) == len(set(ids)), "panel ids repeat"
print(f"{len(alerts)} alerts, {len(records)} recording rules, {len(panels)} panels; "
      f"{count} metric references, all exported by the aggregator or the worker")
PY
echo "PASS"
