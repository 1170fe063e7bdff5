# shellcheck shell=bash
# k8s-pods.sh - the Kubernetes part of check-deploy.sh (sourced; uses its variables and
# helpers: src, here, tmp, RUN, LABEL, AGG_IMAGE, REG_IMAGE, AGG_IP, pki, keys, bin, say,
# fail, wait_log, log_count, stop_within, SEC).
#
#   1. every overlay of deploy/k8s rendered with `kubectl kustomize`
#   2. every rendered object validated against the Kubernetes API's OpenAPI schema
#      (tests/deploy/k8s-schema: kubernetes-models, pinned by its package-lock.json),
#      and the validator shown to refuse a wrong type and an unknown field
#   3. the pod templates of the central overlay's StatefulSet and of the eu-west and
#      ap-south overlays' Jobs as Pods (kube_pods.py), with the ConfigMaps and Secrets
#      made by the same `kubectl create` commands as deploy/README.md, run with
#      `podman kube play` on the networks of the container federation: rounds complete

k8s_checks() {
    local k=$tmp/k8s ov
    mkdir -p "$k"
    # 1. render
    for ov in central eu-west us-east ap-south; do
        kubectl kustomize "$src/deploy/k8s/overlays/$ov" >"$k/rendered-$ov.yaml" 2>"$k/kustomize.err" ||
            fail "kubectl kustomize deploy/k8s/overlays/$ov: $(cat "$k/kustomize.err")"
    done
    say "   rendered every overlay: central eu-west us-east ap-south ($(kubectl version --client 2>/dev/null | grep -i kustomize | tr -d '\n'))"

    # 2. validate
    cp "$here/k8s-schema/package.json" "$here/k8s-schema/package-lock.json" "$here/k8s-schema/validate.mjs" "$k/"
    (cd "$k" && npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1) ||
        fail "npm ci (tests/deploy/k8s-schema): $(tail -5 "$k/npm.log")"
    to_json() { python3 -c 'import json, sys, yaml; print(json.dumps([o for o in yaml.safe_load_all(sys.stdin) if o]))'; }
    for ov in central eu-west us-east ap-south; do
        to_json <"$k/rendered-$ov.yaml" | (cd "$k" && node validate.mjs) >"$k/validate-$ov.log" 2>&1 ||
            fail "overlay $ov does not validate: $(grep -v '^ok' "$k/validate-$ov.log")"
        sed "s/^/   $ov: /" "$k/validate-$ov.log"
    done
    # The validator refuses what the API server would: a wrong type, an unknown field.
    sed -e 's/readinessProbe:/readinesProbe:/' -e 's/terminationGracePeriodSeconds: 90/terminationGracePeriodSeconds: "90"/' \
        "$k/rendered-central.yaml" | to_json | (cd "$k" && node validate.mjs) >"$k/validate-bad.log" 2>&1 &&
        fail "the schema validator accepted an unknown field and a wrong type"
    if ! grep -q 'unknown field "readinesProbe"' "$k/validate-bad.log" || ! grep -q 'must be integer' "$k/validate-bad.log"; then
        fail "the schema validator's refusal does not name both faults: $(cat "$k/validate-bad.log")"
    fi

    # 3. the pod templates, run.  The configurations are the container federation's,
    # with the regions that run here (the GPU region us-east is an MPIJob).
    local regions=(eu-west ap-south) r
    python3 - "$tmp/aggregator.textproto" "$k/aggregator.textproto" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r'regions \{\n  id: "us-east"\n[^}]*\}\n', "", text)
open(sys.argv[2], "w").write(text)
EOF
    grep -q 'us-east' "$k/aggregator.textproto" && fail "could not take us-east out of the aggregator configuration"
    for r in "${regions[@]}"; do
        python3 - "$tmp/worker-$r.textproto" "$k/worker-$r.textproto" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
text = re.sub(r'regions \{\n  id: "us-east"\n[^}]*\}\n', "", text)
open(sys.argv[2], "w").write(text)
EOF
    done
    # A platform team's own overlay on top of the repository's: its configuration, its
    # image (kustomize's replace of the generated ConfigMap and `images:`).
    overlay() { # NAME KIND_IMAGE CONFIG_KEY CONFIG_FILE GENERATED_NAME
        mkdir -p "$k/ov-$1"
        cp "$4" "$k/ov-$1/$3"
        cat >"$k/ov-$1/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- $(python3 -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$src/deploy/k8s/overlays/$1" "$k/ov-$1")
configMapGenerator:
- name: $5
  behavior: replace
  files:
  - $3
images:
- name: registry.example.org/$2
  newName: ${6%:*}
  newTag: ${6##*:}
EOF
        kubectl kustomize "$k/ov-$1" >"$k/test-$1.yaml" 2>"$k/kustomize.err" ||
            fail "kubectl kustomize of the test overlay over $1: $(cat "$k/kustomize.err")"
        python3 "$here/kube_pods.py" pod "$k/test-$1.yaml" "$RUN" >"$k/play-$1.yaml"
    }
    overlay central fedagg-aggregator aggregator.textproto "$k/aggregator.textproto" fedagg-aggregator-config "$AGG_IMAGE"
    for r in "${regions[@]}"; do
        overlay "$r" fedagg-region worker.textproto "$k/worker-$r.textproto" fedagg-worker-config "$REG_IMAGE"
    done
    # The objects made out of band, by deploy/README.md's commands (--dry-run: no cluster).
    (cd "$tmp" && kubectl -n fedagg create configmap fedagg-federation --from-file=ca.crt=pki/ca.crt \
        --from-file=keys/audit.pub --from-file=keys/eu-west.pub --from-file=keys/us-east.pub \
        --from-file=keys/ap-south.pub --dry-run=client -o yaml) >"$k/federation.yaml"
    (cd "$tmp" && kubectl -n fedagg create secret generic fedagg-aggregator --from-file=pki/server.crt \
        --from-file=pki/server.key --from-file=keys/audit.key --from-file=keys/quic.secret \
        --dry-run=client -o yaml) >"$k/secret-aggregator.yaml"
    for r in "${regions[@]}"; do
        (cd "$tmp" && kubectl -n fedagg create secret generic "fedagg-worker-$r" --from-file="pki/client-$r.crt" \
            --from-file="pki/client-$r.key" --from-file="keys/$r.key" --dry-run=client -o yaml) >"$k/secret-$r.yaml"
    done
    # podman's secret store holds a Kubernetes Secret as the secret's data; the ConfigMap
    # goes into each play file, under the pod's prefixed name.
    # podman 4.3 writes a Secret's data values into the volume without decoding them
    # (files of base64 text): its store gets them decoded.
    for s in aggregator "${regions[@]}"; do
        local sname=fedagg-aggregator
        [ "$s" = aggregator ] || sname=fedagg-worker-$s
        python3 - "$k/secret-$s.yaml" >"$k/secret-$s.podman.yaml" <<'EOF'
import base64, sys, yaml
o = yaml.safe_load(open(sys.argv[1]))
o["data"] = {k: base64.b64decode(v).decode() for k, v in o["data"].items()}
yaml.safe_dump(o, sys.stdout)
EOF
        podman secret create "$RUN-$sname" "$k/secret-$s.podman.yaml" >/dev/null
    done
    python3 - "$k/federation.yaml" "$RUN" >"$k/federation-play.yaml" <<'EOF'
import sys, yaml
o = yaml.safe_load(open(sys.argv[1]))
o["metadata"]["name"] = f"{sys.argv[2]}-{o['metadata']['name']}"
yaml.safe_dump(o, sys.stdout)
EOF
    # The regions' data volumes, filled as a platform team fills its PVC.
    for r in "${regions[@]}"; do
        podman volume create "${LABEL[@]}" "$RUN-fedagg-data-$r" >/dev/null
        local dv
        dv=$(podman volume inspect -f '{{.Mountpoint}}' "$RUN-fedagg-data-$r")
        cp -r "$tmp/data/$r" "$dv/$r"
        chmod -R a+rX "$dv"
    done

    # The container federation's relays still stand between the region networks and the
    # aggregator's address: the aggregator pod takes that address.
    podman ps -a --filter "label=fedagg.check-deploy=$RUN" --format '{{.Names}}' | grep -e '-aggregator$' -e '-worker-' |
        xargs -r podman rm -f >/dev/null
    local play_args=(--log-driver k8s-file)
    (cat "$k/federation-play.yaml"; echo ---; cat "$k/play-central.yaml") >"$k/play-central-all.yaml"
    podman kube play "${play_args[@]}" --network "$RUN-central" --ip "$AGG_IP" --mac-address "$AGG_MAC" "$k/play-central-all.yaml" \
        >"$k/play-central.log" 2>&1 ||
        fail "podman kube play of the aggregator's pod: $(grep -v 'level=error.*systemd' "$k/play-central.log" | tail -5)"
    local apod=$RUN-fedagg-aggregator-0
    wait_log "$apod-aggregator" 'msg="aggregator serving"' 1 90
    curl -sf --max-time 5 "http://$AGG_IP:9464/healthz" >/dev/null || fail "the aggregator pod's /healthz does not answer"
    curl -sf --max-time 5 "http://$AGG_IP:9464/readyz" >/dev/null || fail "the aggregator pod's /readyz does not answer"
    for r in "${regions[@]}"; do
        (cat "$k/federation-play.yaml"; echo ---; cat "$k/play-$r.yaml") >"$k/play-$r-all.yaml"
        podman kube play "${play_args[@]}" --network "$RUN-$r" "$k/play-$r-all.yaml" >"$k/play-$r.log" 2>&1 ||
            fail "podman kube play of $r's pod: $(grep -v 'level=error.*systemd' "$k/play-$r.log" | tail -5)"
    done
    wait_log "$apod-aggregator" 'msg="round completed"' 2 240
    podman logs "$apod-aggregator" 2>&1 | grep 'msg="round completed"' | tail -1 | grep -q 'participants=2' ||
        fail "the pods' last round did not have both regions"
    say "   podman kube play: the aggregator StatefulSet's pod and the eu-west and ap-south Jobs' pods completed $(log_count "$apod-aggregator" 'msg="round completed"') rounds, $(podman logs "$apod-aggregator" 2>&1 | grep 'msg="round completed"' | round_seconds) s a round"
    # What podman made of each template's fields.
    for p in central "${regions[@]}"; do
        local pod
        pod=$(python3 -c 'import sys, yaml; print([o for o in yaml.safe_load_all(open(sys.argv[1])) if o and o["kind"] == "Pod"][0]["metadata"]["name"])' "$k/play-$p.yaml")
        podman ps -a --filter "pod=$pod" --format '{{.Names}}' | grep -v -- '-infra$' |
            xargs podman inspect >"$k/inspect-$p.json"
        say "   $p pod ($pod): what podman honoured"
        python3 "$here/kube_pods.py" check "$k/play-$p.yaml" "$k/inspect-$p.json" ||
            fail "podman did not honour a field the $p pod relies on"
    done
    # The init containers ran: the files staged, the configuration checked.
    # (grep -c reads to the end: grep -q would close the pipe on podman, and pipefail fail)
    [ "$(podman logs "$apod-stage-files" 2>&1 | grep -c 'private /etc/fedagg/private/server.key (0400)')" -gt 0 ] ||
        fail "the aggregator pod's stage-files did not stage server.key: $(podman logs "$apod-stage-files" 2>&1 | tail -3)"
    [ "$(podman logs "$apod-config-check" 2>&1 | grep -c ': OK (aggregator config')" -gt 0 ] ||
        fail "the aggregator pod's config-check did not pass: $(podman logs "$apod-config-check" 2>&1 | tail -3)"
    say "   init containers: stage-files staged the ConfigMaps and Secret, config-check passed"
    for r in "${regions[@]}"; do
        local s
        s=$(stop_within "$RUN-fedagg-worker-$r-worker" 60)
        say "   podman stop of $r's worker container: exit 0 in $s s"
    done
    s=$(stop_within "$apod-aggregator" 90)
    say "   podman stop of the aggregator container: exit 0 in $s s"
}
