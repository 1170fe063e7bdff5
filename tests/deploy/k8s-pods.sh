# shellcheck shell=bash
# k8s-pods.sh - the Kubernetes part of check-deploy.sh (sourced; uses its variables and
# helpers: src, here, tmp, RUN, LABEL, AGG_IMAGE, REG_IMAGE, AGG_IP, AGG_NAME, OPERATOR,
# pki, keys, bin, say, fail, wait_log, log_count, stop_within, round_seconds, SEC).
#
#   1. every overlay of deploy/k8s rendered with `kubectl kustomize`
#   2. every rendered object validated against the Kubernetes API's OpenAPI schema
#      (tests/deploy/k8s-schema: kubernetes-models, pinned by its package-lock.json),
#      and the validator shown to refuse a wrong type and an unknown field
#   3. the pod templates of the central overlay's StatefulSet (the aggregation service)
#      and of the eu-west and ap-south overlays' agent Deployments as Pods
#      (kube_pods.py), with the ConfigMaps and Secrets made by the same `kubectl create`
#      commands as deploy/README.md, run with `podman kube play` on the networks of the
#      container federation.  An operator creates deploy/examples/federation.textproto
#      with `fedagg federation create` from the host; both agents accept it and the
#      default federation, rounds of both complete, the created one finishes; a second
#      agent on an agent's state directory is refused; `podman stop` ends every
#      container with exit 0 within its pod's grace period

k8s_checks() {
    local k=$tmp/k8s ov
    mkdir -p "$k"
    # 1. render
    local overlays=(central eu-west ap-south eu-west-job us-east)
    for ov in "${overlays[@]}"; do
        kubectl kustomize "$src/deploy/k8s/overlays/$ov" >"$k/rendered-$ov.yaml" 2>"$k/kustomize.err" ||
            fail "kubectl kustomize deploy/k8s/overlays/$ov: $(cat "$k/kustomize.err")"
    done
    local have
    have=$(find "$src/deploy/k8s/overlays" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort | tr '\n' ' ')
    [ "$have" = "$(printf '%s\n' "${overlays[@]}" | sort | tr '\n' ' ')" ] ||
        fail "deploy/k8s/overlays holds $have; this test renders ${overlays[*]}"
    say "   rendered every overlay: ${overlays[*]} ($(kubectl version --client 2>/dev/null | tr '\n' ' '))"

    # 2. validate
    cp "$here/k8s-schema/package.json" "$here/k8s-schema/package-lock.json" "$here/k8s-schema/validate.mjs" "$k/"
    (cd "$k" && npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1) ||
        fail "npm ci (tests/deploy/k8s-schema): $(tail -5 "$k/npm.log")"
    to_json() { python3 -c 'import json, sys, yaml; print(json.dumps([o for o in yaml.safe_load_all(sys.stdin) if o]))'; }
    for ov in "${overlays[@]}"; do
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

    # 3. the pod templates, run.  The aggregator's configuration is the container
    # federation's (the example: a service with its default federation); the agents' are
    # the overlays' own with the container federation's one edit (a few local steps a
    # round, not an epoch).  The regions that run here are the CPU regions: the GPU region
    # us-east (an MPIJob) is taken out of what the aggregator and the operator invite.
    local regions=(eu-west ap-south) r s
    drop_us_east() { # IN OUT: the file without its region us-east
        python3 - "$1" "$2" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
out = re.sub(r'regions \{\n  id: "us-east"\n[^}]*\}\n', "", text)
if out == text or "us-east" in out:
    sys.exit(f"{sys.argv[1]}: could not take the region us-east out")
open(sys.argv[2], "w").write(out)
EOF
    }
    drop_us_east "$tmp/aggregator.textproto" "$k/aggregator.textproto" || fail "the aggregator configuration"
    for r in "${regions[@]}"; do
        # (the one-federation workers' configurations, for the systemd units)
        drop_us_east "$tmp/worker-$r.textproto" "$k/worker-$r.textproto" || fail "$r's worker configuration"
        sed 's/^      local_epochs: 1$/      local_steps: 20/' "$src/deploy/k8s/overlays/$r/agent.textproto" \
            >"$k/agent-$r.textproto"
        [ "$(grep -c '^      local_steps: 20$' "$k/agent-$r.textproto")" = 1 ] ||
            fail "the trainer of deploy/k8s/overlays/$r/agent.textproto moved: update the edit"
    done
    # What the operator creates: deploy/examples/federation.textproto with the container
    # federation's deadlines, FED_ROUNDS rounds so that it finishes, the regions of here.
    local fed_rounds=3 fed_id
    drop_us_east "$src/deploy/examples/federation.textproto" "$k/federation.in" || fail "the federation example"
    sed "${ROUND_EDITS[@]}" -e "s/^  rounds: .*/  rounds: $fed_rounds/" "$k/federation.in" >"$k/federation.textproto"
    if ! grep -q "^  rounds: $fed_rounds$" "$k/federation.textproto" ||
        ! grep -q '^  advertise_deadline_ms: 10000$' "$k/federation.textproto"; then
        fail "the round block of deploy/examples/federation.textproto moved: update the edits"
    fi
    fed_id=$(sed -n 's/^federation_id: "\(.*\)"$/\1/p' "$k/federation.textproto")
    # The operator's connection: deploy/examples/operator.textproto with the pod's address
    # (the name its certificate carries stays) and this run's PKI for the workstation's.
    sed -e "s#^aggregator: \".*\"#aggregator: \"$AGG_IP:4433\"#" -e "s#\"/home/$OPERATOR/.fedagg/#\"$pki/#g" \
        "$src/deploy/examples/operator.textproto" >"$k/operator.textproto"
    "$bin/fedagg" config check --type operator "$k/operator.textproto" >"$k/check.log" 2>&1 ||
        fail "the operator configuration: $(cat "$k/check.log")"
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
        overlay "$r" fedagg-region agent.textproto "$k/agent-$r.textproto" fedagg-agent-config "$REG_IMAGE"
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
    # The operator, from the host (its own machine): the federation is created on the
    # running service, checked there, recorded in its service log.
    "$bin/fedagg" federation create "$k/federation.textproto" --config "$k/operator.textproto" >"$k/create.log" 2>&1 ||
        fail "fedagg federation create as operator $OPERATOR: $(cat "$k/create.log")"
    grep -q "federation $fed_id created by $OPERATOR" "$k/create.log" || fail "fedagg federation create said: $(cat "$k/create.log")"
    say "   fedagg federation create (deploy/examples/federation.textproto, $fed_rounds rounds) from the host: $(cat "$k/create.log")"
    for r in "${regions[@]}"; do
        (cat "$k/federation-play.yaml"; echo ---; cat "$k/play-$r.yaml") >"$k/play-$r-all.yaml"
        podman kube play "${play_args[@]}" --network "$RUN-$r" "$k/play-$r-all.yaml" >"$k/play-$r.log" 2>&1 ||
            fail "podman kube play of $r's pod: $(grep -v 'level=error.*systemd' "$k/play-$r.log" | tail -5)"
    done
    # Both federations run at once in each agent (one training at a time on its device).
    fed_json() { "$bin/fedagg" federation show "$1" --json --config "$k/operator.textproto" 2>&1; }
    local t=$SECONDS j
    until j=$(fed_json "$fed_id") && python3 -c 'import json, sys; sys.exit(json.loads(sys.argv[1]).get("state") != "finished")' "$j" 2>/dev/null; do
        [ $((SECONDS - t)) -lt 300 ] || fail "federation $fed_id did not finish its $fed_rounds rounds in 300 s: $j"
        for r in "${regions[@]}"; do
            [ "$(podman inspect -f '{{.State.Running}}' "$RUN-fedagg-agent-$r-agent" 2>/dev/null)" = true ] ||
                fail "$r's agent exited ($(exit_code "$RUN-fedagg-agent-$r-agent"))"
        done
        sleep 1
    done
    local fed_s=$((SECONDS - t))
    python3 - "$j" "$fed_rounds" "${regions[@]}" <<'EOF' || fail "federation $fed_id: $j"
import json, sys
j, rounds, regions = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
assert j.get("rounds_completed") == rounds, f"{j.get('rounds_completed')} rounds completed, not {rounds}"
dec = {r.get("id"): r.get("decision") for r in j.get("regions", [])}
assert all(dec.get(r) == "accepted" for r in regions), f"decisions {dec}"
EOF
    wait_log "$apod-aggregator" 'msg="round completed".* federation=example-federation ' 2 240
    local default_rounds
    default_rounds=$(podman logs "$apod-aggregator" 2>&1 | grep 'msg="round completed".* federation=example-federation ')
    echo "$default_rounds" | tail -1 | grep -q 'participants=2' ||
        fail "the default federation's last round did not have both regions: $(echo "$default_rounds" | tail -1)"
    say "   podman kube play: the aggregator StatefulSet's pod and the eu-west and ap-south agent Deployments' pods; both agents accepted both federations: $fed_id finished its $fed_rounds rounds ${fed_s} s after the agents' pods were played, the default federation completed $(echo "$default_rounds" | wc -l) rounds, $(echo "$default_rounds" | round_seconds) s a round"
    for r in "${regions[@]}"; do
        # the worker learns that the federation finished at its next poll
        wait_log "$RUN-fedagg-agent-$r-agent" "msg=\"federation worker ended\".* federation=$fed_id .*status 0" 1 60
    done
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
    [ "$(podman logs "$apod-config-check" 2>&1 | grep -c ': OK (aggregator config.*a service')" -gt 0 ] ||
        fail "the aggregator pod's config-check did not pass: $(podman logs "$apod-config-check" 2>&1 | tail -3)"
    for r in "${regions[@]}"; do
        local rp=$RUN-fedagg-agent-$r
        [ "$(podman logs "$rp-stage-files" 2>&1 | grep -c "private /etc/fedagg/private/$r.key (0400)")" -gt 0 ] ||
            fail "$r's stage-files did not stage $r.key: $(podman logs "$rp-stage-files" 2>&1 | tail -3)"
        [ "$(podman logs "$rp-config-check" 2>&1 | grep -c ': OK (region agent config')" -gt 0 ] ||
            fail "$r's config-check did not pass: $(podman logs "$rp-config-check" 2>&1 | tail -3)"
    done
    say "   init containers: stage-files staged the ConfigMaps and Secrets, config-check passed (aggregator: a service; regions: region agents)"
    # Why the Deployment is Recreate: a second agent on a state directory in use (what a
    # RollingUpdate's new pod would run) refuses to start, and the first goes on.
    local a1=$RUN-fedagg-agent-eu-west-agent rc=0
    timeout 60 podman exec "$a1" /usr/local/bin/fedagg-worker --config /etc/fedagg/agent.textproto >"$k/agent2.log" 2>&1 || rc=$?
    case $rc in 0 | 124) fail "a second agent on eu-west's state directory: exit $rc: $(tail -3 "$k/agent2.log")" ;; esac
    [ "$(grep -c 'another region agent runs with this state directory' "$k/agent2.log")" -gt 0 ] ||
        fail "the second agent's refusal does not say why: $(tail -3 "$k/agent2.log")"
    [ "$(podman inspect -f '{{.State.Running}}' "$a1")" = true ] || fail "eu-west's agent exited when a second one started"
    say "   a second agent on eu-west's state directory (podman exec in its pod): exit $rc, $(grep -o 'another region agent runs with this state directory' "$k/agent2.log")"
    for r in "${regions[@]}"; do
        local grace
        grace=$(python3 -c 'import sys, yaml; print([o for o in yaml.safe_load_all(open(sys.argv[1])) if o and o["kind"] == "Pod"][0]["spec"]["terminationGracePeriodSeconds"])' "$k/play-$r.yaml")
        s=$(stop_within "$RUN-fedagg-agent-$r-agent" "$grace")
        [ "$(podman logs "$RUN-fedagg-agent-$r-agent" 2>&1 | grep -c 'level=info msg="region agent stopped"')" -gt 0 ] ||
            fail "$r's agent did not log a clean stop: $(podman logs --tail 3 "$RUN-fedagg-agent-$r-agent" 2>&1)"
        say "   podman stop of $r's agent container: exit 0 in $s s (its pod's grace $grace s), its federation workers stopped first"
    done
    s=$(stop_within "$apod-aggregator" 90)
    drained "$apod-aggregator"
    say "   podman stop of the aggregator container: exit 0 in $s s, drained"
}
