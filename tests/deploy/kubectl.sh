# shellcheck shell=bash
# kubectl.sh - can this machine's kubectl render deploy/k8s (sourced by check-deploy.sh
# and tests/integration/it_deploy_examples.sh)?
#
#   kubectl_renders SCRATCH_DIR     0 when it can; otherwise 1, and the reason on stdout
#
# The overlays use kustomize's `labels:` field, which kubectl renders from 1.21 on.
# Debian 12's own kubectl (package kubernetes-client) is 1.20: it stops on the field
# ("json: unknown field \"labels\"").  The version string alone does not tell (vendors
# build their own: "v1.32.4-dispatcher"), so a one-object kustomization with `labels:`
# is rendered and its label looked for.

kubectl_renders() {
    local p=$1/kubectl-probe ver
    command -v kubectl >/dev/null || {
        echo "kubectl is not installed (deploy/install-deps.sh deploy; 1.21 or later)"
        return 1
    }
    mkdir -p "$p"
    printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\n' >"$p/cm.yaml"
    printf 'resources:\n- cm.yaml\nlabels:\n- pairs:\n    fedagg-probe: rendered\n' >"$p/kustomization.yaml"
    if kubectl kustomize "$p" 2>"$p/err" | grep -q 'fedagg-probe: rendered'; then
        return 0
    fi
    ver=$(kubectl version --client -o json 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])' 2>/dev/null) ||
        ver="of unknown version"
    echo "kubectl $ver ($(command -v kubectl)) cannot render kustomize's 'labels:' field, which the" \
        "overlays use: kubectl 1.21 or later is needed (Debian 12's kubernetes-client is 1.20;" \
        "install kubectl from the Kubernetes project's apt repository). It said: $(head -c 300 "$p/err")"
    return 1
}
