#!/usr/bin/env bash
# check-deploy.sh - fedagg deployed the way its users deploy it (`make check-deploy`).
#
#   tests/deploy/check-deploy.sh [BUILD_DIR]      (default: build; run as root)
#
# What runs, in order (deploy/README.md gives the same commands to a platform team):
#   1. a Debian 12 base image, made once with debootstrap --variant=minbase from this
#      machine's apt mirror and `podman import`, reused by its tag afterwards
#   2. the two images of deploy/Dockerfile (aggregator, region), built with podman from a
#      clean clone of this tree's HEAD; their size, the size added above the base, the
#      layer count; --version names the commit; uid 10001
#   3. a federation in containers: the aggregator on a central network, three regions
#      each on a network of its own whose only way to the aggregator is the UDP
#      impairment relay (fedagg-relay, one container per region on both networks) at
#      150 ms RTT and 0.1 % loss; PKI with the aggregator's DNS name, configurations from
#      deploy/examples, keys and data on volumes; every container read-only, with no
#      capability.  Rounds complete; `fedagg audit verify` of the aggregator's volume
#      from the host; a region's inclusion proof checked offline
#   4. faults: the aggregator SIGKILLed mid-round and a new container on the same volume
#      resumes; a region container SIGKILLed and restarted rejoins; an upgrade to an
#      image of a newer commit keeps the model versions and the audit log; `podman stop`
#      of every daemon exits 0 within its grace period
#   5. the same federation on the host (same configurations, binaries of BUILD_DIR, the
#      same relay profile on loopback): seconds per round, containers against host
#   6. the Kubernetes manifests: every overlay rendered (kubectl kustomize), every object
#      validated against the Kubernetes API's OpenAPI schema (tests/deploy/k8s-schema);
#      the aggregator StatefulSet's and two regions' agent Deployments' pod templates
#      converted into Pods (tests/deploy/kube_pods.py) and run with `podman kube play`:
#      an operator creates a federation on the aggregation service, the agents join it
#      and the default one, rounds of both complete (tests/deploy/k8s-pods.sh)
#   7. the systemd units: started for real where a systemd can run, one-federation
#      workers and then region agents; SKIP with the reason where it cannot
#
# Podman's quirks of this machine (runc instead of crun, limits it may not raise) are
# in the containers.conf this script writes, never in the Dockerfile.  Names of
# networks, volumes, containers and pods start with the run's id; all of them go at
# exit.  Environment: DEPLOY_ROUNDS (rounds per measurement, default 6), DEPLOY_KEEP=1
# (keep the work directory), DEPLOY_BASE_TAG (the base image's tag).
set -euo pipefail

src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" 2>/dev/null && pwd) || {
    echo "check-deploy: FAIL: build directory ${1:-$src/build} missing (make build)" >&2
    exit 1
}
bin=$build/bin
here=$src/tests/deploy
ROUNDS=${DEPLOY_ROUNDS:-6}
BASE_TAG=${DEPLOY_BASE_TAG:-localhost/fedagg-check-base:bookworm-minbase}
REGIONS=(eu-west us-east ap-south)
AGG_NAME=fedagg.example.org # the name in the aggregator's certificate, what regions dial
# The operator of deploy/examples/operator.textproto (its certificate's name).
OPERATOR=$(sed -n 's#^  cert_file: ".*/operator-\([a-z0-9-]*\)\.crt"$#\1#p' "$src/deploy/examples/operator.textproto")
RELAY_PROFILE=(--delay 75ms --loss 0.1%)
AGG_GRACE=90 # TimeoutStopSec of the aggregator's unit, the StatefulSet's grace period
WRK_GRACE=60 # the same for a worker
RUN=fadep$$
T0=$SECONDS
tmp=""

say() { printf 'check-deploy [%4ds] %s\n' $((SECONDS - T0)) "$*"; }
fail() {
    echo "check-deploy: FAIL: $*" >&2
    exit 1
}

# -------------------------------------------------------------------- preconditions
[ "$(id -u)" = 0 ] || fail "needs root (podman with networks, debootstrap)"
for c in podman runc debootstrap kubectl node npm python3 git curl; do
    command -v "$c" >/dev/null || fail "$c is missing: run deploy/install-deps.sh deploy (make check-deploy does)"
done
# shellcheck source=tests/deploy/kubectl.sh
source "$here/kubectl.sh"
python3 -c 'import yaml' 2>/dev/null || fail "python3 without the yaml module (python3-yaml)"
for b in fedagg fedagg-aggregator fedagg-worker fedagg-relay; do
    [ -x "$bin/$b" ] || fail "$bin/$b is missing (make build)"
done

tmp=$(mktemp -d /var/tmp/fedagg-check-deploy.XXXXXX)
chmod 0755 "$tmp"
# Step 6 renders the overlays: a kubectl that cannot is found now, not after the builds.
why=$(kubectl_renders "$tmp") || fail "$why"
export CONTAINERS_CONF=$tmp/containers.conf
# runc: crun cannot run on this kernel's hybrid cgroups; the limits: podman's defaults
# are above what a process here may set (no CAP_SYS_RESOURCE).
cat >"$CONTAINERS_CONF" <<EOF
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
EOF
LABEL=(--label "fedagg.check-deploy=$RUN")

cleanup() {
    local rc=$?
    set +e
    if [ "$rc" -ne 0 ] && [ -n "$tmp" ]; then
        echo "---- check-deploy failed (exit $rc); last lines of each container's log ----" >&2
        # (by name: the pods' containers, made by podman kube play, carry no label of ours)
        for c in $(podman ps -a --filter "name=^$RUN-" --format '{{.Names}}' 2>/dev/null | grep -v -- '-infra$'); do
            echo "== $c" >&2
            podman logs --tail 12 "$c" 2>&1 | sed 's/^/   /' >&2
        done
        for f in "$tmp"/host/logs/*.log; do
            [ -f "$f" ] || continue
            echo "== host: ${f##*/}" >&2
            tail -n 8 "$f" | sed 's/^/   /' >&2
        done
    fi
    for p in "${host_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for pod in $(podman pod ps --filter "name=^$RUN" --format '{{.Name}}' 2>/dev/null); do
        podman pod rm -f "$pod" >/dev/null 2>&1
    done
    podman ps -a --filter "label=fedagg.check-deploy=$RUN" --format '{{.Names}}' 2>/dev/null |
        xargs -r podman rm -f -t 0 >/dev/null 2>&1
    podman volume ls --format '{{.Name}}' 2>/dev/null | grep "^$RUN" | xargs -r podman volume rm -f >/dev/null 2>&1
    podman network ls --format '{{.Name}}' 2>/dev/null | grep "^$RUN" | xargs -r podman network rm -f >/dev/null 2>&1
    podman secret ls --format '{{.Name}}' 2>/dev/null | grep "^$RUN" | xargs -r podman secret rm >/dev/null 2>&1
    for i in "${run_images[@]}"; do podman rmi -f "$i" >/dev/null 2>&1; done
    if [ -n "${DEPLOY_KEEP:-}" ]; then
        echo "check-deploy: kept $tmp" >&2
    elif [ -n "$tmp" ]; then
        rm -rf "$tmp"
    fi
    exit "$rc"
}
host_pids=()
run_images=()
trap cleanup EXIT
trap 'exit 130' INT TERM

# Seconds of a container's run so far, its exit code.
exit_code() { podman inspect -f '{{.State.ExitCode}}' "$1"; }

# wait_log CONTAINER PATTERN COUNT TIMEOUT: until the container's log has COUNT lines
# matching PATTERN.
log_count() {
    local n
    n=$(podman logs "$1" 2>&1 | grep -c -- "$2") || true
    echo "${n:-0}"
}
wait_log() {
    local c=$1 pat=$2 n=$3 t=$4 start=$SECONDS
    until [ "$(log_count "$c" "$pat")" -ge "$n" ]; do
        [ $((SECONDS - start)) -lt "$t" ] || fail "$c: fewer than $n '$pat' after ${t}s"
        [ "$(podman inspect -f '{{.State.Running}}' "$c" 2>/dev/null)" = true ] ||
            fail "$c exited ($(exit_code "$c")) while waiting for '$pat'"
        sleep 0.5
    done
}

# The seconds between the first and the last of the "round completed" lines of a log
# (stdin), divided by their number less one: the steady round time, start-up excluded.
round_seconds() {
    python3 -c '
import re, sys, datetime
ts = [datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
      for m in (re.match(r"ts=(\S+)Z .*msg=\"round completed\"", l) for l in sys.stdin) if m]
if len(ts) < 2:
    sys.exit("fewer than two rounds in the log")
print("%.2f" % ((ts[-1] - ts[0]).total_seconds() / (len(ts) - 1)))'
}

# --------------------------------------------------------------------- 1. base image
say "1. Debian 12 base image ($BASE_TAG)"
exec 9>/var/tmp/fedagg-check-deploy-base.lock
flock 9
if podman image exists "$BASE_TAG"; then
    say "   reused (made $(podman image inspect -f '{{.Created}}' "$BASE_TAG" | cut -c1-19))"
else
    mirror=$(apt-get indextargets --format '$(SITE) $(RELEASE) $(COMPONENT)' 'Identifier: Packages' |
        awk '$2 == "bookworm" && $3 == "main" { print $1; exit }')
    [ -n "$mirror" ] || fail "no apt source for bookworm main on this machine (apt-get update?)"
    t=$SECONDS
    debootstrap --variant=minbase bookworm "$tmp/rootfs" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
        fail "debootstrap from $mirror: $(tail -3 "$tmp/debootstrap.log")"
    tar -C "$tmp/rootfs" -c . | podman import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' - "$BASE_TAG" >/dev/null
    rm -rf "$tmp/rootfs"
    say "   made with debootstrap from $mirror in $((SECONDS - t)) s"
fi
flock -u 9
base_size=$(podman image inspect -f '{{.Size}}' "$BASE_TAG")
base_layers=$(podman image inspect -f '{{len .RootFS.Layers}}' "$BASE_TAG")
# Intermediate images of earlier runs' builds older than two hours: the cache of a tree
# that moved on.
podman image prune -f --filter until=2h >/dev/null 2>&1 || true

# ------------------------------------------------------------------------ 2. images
say "2. images from a clean clone of HEAD"
git -C "$src" rev-parse --verify -q HEAD >/dev/null || fail "$src is not a git checkout with a commit"
if [ -n "$(git -C "$src" status --porcelain --untracked-files=no)" ]; then
    say "   note: $src has uncommitted changes; the images are built from the committed HEAD"
fi
git clone -q --no-hardlinks "$src" "$tmp/src"
commit=$(git -C "$tmp/src" rev-parse HEAD)
tag=check-${commit:0:12}-$RUN # a tag of this run's own: another run may remove its images
AGG_IMAGE=localhost/fedagg-aggregator:$tag
REG_IMAGE=localhost/fedagg-region:$tag
build_image() { # TARGET TAG COMMIT CONTEXT -> seconds on stdout
    local t=$SECONDS
    podman build -f "$4/deploy/Dockerfile" --target "$1" \
        --build-arg "BUILD_IMAGE=$BASE_TAG" --build-arg "RUNTIME_IMAGE=$BASE_TAG" \
        --build-arg "FEDAGG_COMMIT=$3" -t "$2" "$4" >"$tmp/build-$1.log" 2>&1 ||
        fail "podman build --target $1: $(grep -v '^ ' "$tmp/build-$1.log" | tail -5)"
    echo $((SECONDS - t))
}
build_agg_s=$(build_image aggregator "$AGG_IMAGE" "$commit" "$tmp/src")
run_images+=("$AGG_IMAGE")
build_reg_s=$(build_image region "$REG_IMAGE" "$commit" "$tmp/src")
run_images+=("$REG_IMAGE")
say "   built in ${build_agg_s} s (aggregator) + ${build_reg_s} s (region, sharing the build stage)"
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
image_report() { # IMAGE NAME
    local size layers user
    size=$(podman image inspect -f '{{.Size}}' "$1")
    layers=$(podman image inspect -f '{{len .RootFS.Layers}}' "$1")
    user=$(podman image inspect -f '{{.Config.User}}' "$1")
    [ "$user" = 10001:10001 ] || fail "$2 image runs as '$user', not 10001:10001"
    say "   $2 image: $(mb "$size") MB, $(mb $((size - base_size))) MB above the $(mb "$base_size") MB base, $layers layers ($((layers - base_layers)) added)"
    awk -v a=$((size - base_size)) 'BEGIN { exit !(a < 150e6) }' ||
        fail "$2 image adds $(mb $((size - base_size))) MB above its base (at most 150)"
}
image_report "$AGG_IMAGE" aggregator
image_report "$REG_IMAGE" region
SEC=(--read-only --cap-drop all --security-opt no-new-privileges)
for pair in "$AGG_IMAGE fedagg-aggregator" "$AGG_IMAGE fedagg" "$REG_IMAGE fedagg-worker" "$REG_IMAGE fedagg"; do
    # shellcheck disable=SC2086 # IMAGE PROGRAM, split on purpose
    set -- $pair
    v=$(podman run --rm "${SEC[@]}" "$1" "$2" --version)
    [ "$v" = "$2 0.1.0 (commit $commit)" ] || fail "$2 --version in $1 says '$v', not the commit $commit"
done
say "   --version: $(podman run --rm "${SEC[@]}" "$AGG_IMAGE" fedagg-aggregator --version)"
# The region image's MPI and ssh for multi-node jobs: mpirun runs, sshd takes its settings.
podman run --rm "${SEC[@]}" "$REG_IMAGE" sh -c 'mpirun --version | head -1 &&
    ssh-keygen -q -t ed25519 -N "" -f /tmp/hostkey && /usr/sbin/sshd -t -f /etc/ssh/fedagg_sshd_config \
        -o HostKey=/tmp/hostkey && test -f /etc/ssh/ssh_config.d/fedagg-mpi.conf' >"$tmp/region-image.log" 2>&1 ||
    fail "region image: mpirun or sshd's settings: $(cat "$tmp/region-image.log")"
# A tree without git metadata says so.
v=$(podman run --rm "${SEC[@]}" "$AGG_IMAGE" sh -c 'id -u; ls /usr/local/bin' | tr '\n' ' ')
case $v in "10001 fedagg fedagg-aggregator fedagg-stage-files "*) ;; *) fail "aggregator image: unexpected user or binaries: $v" ;; esac

# ----------------------------------------------------------- 3. PKI, keys, data, configs
say "3. PKI, keys, configurations (deploy/examples), data; networks and volumes"
pki=$tmp/pki
keys=$tmp/keys
"$src/deploy/pki.sh" "$pki" --regions "$(IFS=,; echo "${REGIONS[*]}")" --operators "$OPERATOR" --aggregator-name "$AGG_NAME" \
    >"$tmp/pki.log" 2>&1 || fail "deploy/pki.sh: $(tail -3 "$tmp/pki.log")"
mkdir -p "$keys"
for k in audit "${REGIONS[@]}"; do
    "$bin/fedagg" keygen --out "$keys/$k" >/dev/null || fail "fedagg keygen $k"
done
(umask 077 && openssl rand -hex 32 >"$keys/quic.secret")
"$bin/fedagg" data split --regions 3 --alpha 0.5 --seed 7 --names "$(IFS=,; echo "${REGIONS[*]}")" \
    --out "$tmp/data" >"$tmp/split.log" 2>&1 || fail "fedagg data split: $(tail -3 "$tmp/split.log")"
chmod -R a+rX "$tmp/data"

# The configurations are the examples with what an operator changes for this
# federation: shorter phase deadlines and no advertise grace (regions train for
# seconds here, not minutes), a few local steps instead of an epoch.
"$bin/fedagg" config check --no-files --type aggregator "$src/deploy/examples/aggregator.textproto" >/dev/null
ROUND_EDITS=(-e 's/^  advertise_deadline_ms: .*/  advertise_deadline_ms: 10000/'
    -e 's/^  shares_deadline_ms: .*/  shares_deadline_ms: 10000/'
    -e 's/^  masked_deadline_ms: .*/  masked_deadline_ms: 20000/'
    -e 's/^  consistency_deadline_ms: .*/  consistency_deadline_ms: 10000/'
    -e 's/^  unmask_deadline_ms: .*/  unmask_deadline_ms: 10000/'
    -e 's/^  advertise_grace_ms: .*/  advertise_grace_ms: 0/')
sed "${ROUND_EDITS[@]}" "$src/deploy/examples/aggregator.textproto" >"$tmp/aggregator.textproto"
grep -q "^operators: \[\"$OPERATOR\"\]$" "$tmp/aggregator.textproto" ||
    fail "the aggregator example does not list the operator example's '$OPERATOR' in its operators"
worker_config() { # REGION -> stdout
    # The example is eu-west's: another region changes its own names, not the list.
    sed -e "/^regions {/,/^}/!s/eu-west/$1/g" -e 's/^    local_epochs: 1$/    local_steps: 20/' \
        "$src/deploy/examples/worker.textproto"
}
grep -q '^  advertise_deadline_ms: 10000$' "$tmp/aggregator.textproto" ||
    fail "the aggregator example's round block moved: update the edits"
[ "$(worker_config eu-west | grep -c '^    local_steps: 20$')" = 1 ] || fail "the worker example's trainer moved: update the edits"

# One /etc/fedagg per host, as deploy/README.md lays it out: the configuration, public/
# (the same everywhere), private/ (this host's secrets, the daemon's user's, 0400).
etc_host() { # NAME CONFIG_FILE CONFIG_NAME PRIVATE_FILES...
    local host=$1 d=$tmp/hosts/$1/etc/fedagg cfg=$2 name=$3
    shift 3
    mkdir -p "$d/public" "$d/private"
    install -m 0444 "$cfg" "$d/$name"
    install -m 0444 "$pki/ca.crt" "$keys/audit.pub" "$d/public/"
    for r in "${REGIONS[@]}"; do install -m 0444 "$keys/$r.pub" "$d/public/"; done
    install -o 10001 -g 10001 -m 0400 "$@" "$d/private/"
    chmod 0755 "$tmp/hosts" "$tmp/hosts/$host" "$tmp/hosts/$host/etc" "$d" "$d/public" "$d/private"
}
etc_host aggregator "$tmp/aggregator.textproto" aggregator.textproto \
    "$pki/server.crt" "$pki/server.key" "$keys/audit.key" "$keys/quic.secret"
for r in "${REGIONS[@]}"; do
    worker_config "$r" >"$tmp/worker-$r.textproto"
    etc_host "$r" "$tmp/worker-$r.textproto" worker.textproto \
        "$pki/client-$r.crt" "$pki/client-$r.key" "$keys/$r.key"
done

podman network create "${LABEL[@]}" "$RUN-central" >/dev/null
central_subnet=$(podman network inspect -f '{{range .Subnets}}{{.Subnet}}{{end}}' "$RUN-central")
AGG_IP=$(python3 -c 'import ipaddress,sys; print(ipaddress.ip_network(sys.argv[1])[10])' "$central_subnet")
# The aggregator's address stays when its container is replaced, as a Service's does;
# its MAC too, or the relays' neighbour entries would point at the old container until
# they expire (seconds to tens of seconds of lost datagrams).
AGG_MAC=$(printf '02:fa:de:%02x:%02x:%02x' $((RANDOM % 256)) $((RANDOM % 256)) $((RANDOM % 256)))
for r in "${REGIONS[@]}"; do
    # --internal: no route out, so the relay is the only way to the aggregator.
    podman network create --internal "${LABEL[@]}" "$RUN-$r" >/dev/null
done
say "   networks: $RUN-central ($central_subnet, aggregator $AGG_IP), $(for r in "${REGIONS[@]}"; do
    printf '%s (%s, internal) ' "$RUN-$r" "$(podman network inspect -f '{{range .Subnets}}{{.Subnet}}{{end}}' "$RUN-$r")"
done)"

# ------------------------------------------------------------- 3b. the federation
relay_start() { # REGION SEED
    local c=$RUN-relay-$1
    podman run -d --name "$c" "${LABEL[@]}" "${SEC[@]}" --user 10001:10001 --network "$RUN-central" \
        -v "$bin/fedagg-relay:/usr/local/bin/fedagg-relay:ro" "$BASE_TAG" \
        fedagg-relay --listen 0.0.0.0:4433 --upstream "$AGG_IP:4433" "${RELAY_PROFILE[@]}" --seed "$2" \
        >/dev/null
    # The region's network: the relay answers for the aggregator's name there.
    podman network connect --alias "$AGG_NAME" "$RUN-$1" "$c"
}
agg_start() { # IMAGE NAME
    podman run -d --name "$2" "${LABEL[@]}" "${SEC[@]}" --network "$RUN-central" --ip "$AGG_IP" --mac-address "$AGG_MAC" \
        -v "$tmp/hosts/aggregator/etc/fedagg:/etc/fedagg:ro" -v "$RUN-aggregator-state:/var/lib/fedagg" \
        -e OPENBLAS_NUM_THREADS=1 --stop-timeout "$AGG_GRACE" \
        "$1" fedagg-aggregator --config /etc/fedagg/aggregator.textproto >/dev/null
}
worker_start() { # REGION NAME
    podman run -d --name "$2" "${LABEL[@]}" "${SEC[@]}" --network "$RUN-$1" \
        -v "$tmp/hosts/$1/etc/fedagg:/etc/fedagg:ro" -v "$tmp/data/$1:/srv/fedagg/data/$1:ro" \
        -v "$RUN-worker-$1-state:/var/lib/fedagg" -e OPENBLAS_NUM_THREADS=1 --stop-timeout "$WRK_GRACE" \
        "$REG_IMAGE" fedagg-worker --config /etc/fedagg/worker.textproto >/dev/null
}
# stop_within CONTAINER GRACE: podman stop (SIGTERM, SIGKILL after GRACE); exit 0 in time.
stop_within() {
    local t=$SECONDS rc
    podman stop -t "$2" "$1" >/dev/null
    rc=$(exit_code "$1")
    [ "$rc" = 0 ] || fail "$1 exited $rc after SIGTERM (podman stop -t $2): $(podman logs --tail 3 "$1" 2>&1)"
    [ $((SECONDS - t)) -lt "$2" ] || fail "$1 took $((SECONDS - t)) s to stop (grace $2 s)"
    echo $((SECONDS - t))
}
# drained CONTAINER: the aggregator in it stopped by its drain, as its log says, and was
# not ended by the signal itself (an exit status podman may not tell apart).
drained() {
    local log
    log=$(podman logs "$1" 2>&1)
    case $log in *'msg="signal received, draining"'*'msg="aggregator stopped"'*) ;;
    *) fail "$1 did not drain on SIGTERM: $(echo "$log" | tail -3)" ;;
    esac
}

podman volume create "${LABEL[@]}" "$RUN-aggregator-state" >/dev/null
for r in "${REGIONS[@]}"; do podman volume create "${LABEL[@]}" "$RUN-worker-$r-state" >/dev/null; done
# What the pods' config-check init container and the units' ExecStartPre run.
podman run --rm "${SEC[@]}" -v "$tmp/hosts/aggregator/etc/fedagg:/etc/fedagg:ro" "$AGG_IMAGE" \
    fedagg config check --type aggregator /etc/fedagg/aggregator.textproto >"$tmp/check.log" 2>&1 ||
    fail "config check of the aggregator in its container: $(cat "$tmp/check.log")"
seed=1
for r in "${REGIONS[@]}"; do
    podman run --rm "${SEC[@]}" -v "$tmp/hosts/$r/etc/fedagg:/etc/fedagg:ro" \
        -v "$tmp/data/$r:/srv/fedagg/data/$r:ro" -v "$RUN-worker-$r-state:/var/lib/fedagg" "$REG_IMAGE" \
        fedagg config check --type worker /etc/fedagg/worker.textproto >"$tmp/check.log" 2>&1 ||
        fail "config check of $r in its container: $(cat "$tmp/check.log")"
    relay_start "$r" "$seed"
    seed=$((seed + 1))
done
say "   relays up: one per region, ${RELAY_PROFILE[*]} (150 ms RTT)"
AGG=$RUN-aggregator
agg_start "$AGG_IMAGE" "$AGG"
wait_log "$AGG" 'msg="aggregator serving"' 1 60
curl -sf --max-time 5 "http://$AGG_IP:9464/readyz" >/dev/null || fail "/readyz of $AGG_IP:9464 does not answer 200"
for r in "${REGIONS[@]}"; do worker_start "$r" "$RUN-worker-$r"; done
t=$SECONDS
wait_log "$AGG" 'msg="round completed"' "$ROUNDS" 300
ctr_round_s=$(podman logs "$AGG" 2>&1 | grep 'msg="round completed"' | round_seconds)
say "   $ROUNDS rounds of secure aggregation in containers, $ctr_round_s s a round (first after $((SECONDS - t)) s in all)"
[ "$(podman logs "$AGG" 2>&1 | grep 'msg="round completed"' | tail -1 | grep -c 'participants=3')" = 1 ] ||
    fail "the last round did not have the 3 regions: $(podman logs "$AGG" 2>&1 | grep 'round completed' | tail -1)"

# ---------------------------------------------------------------------- 4. faults
say "4. faults"
# The aggregator SIGKILLed in the middle of a round: after a round completed, the next
# one is under way (regions training, advertising).
n=$(log_count "$AGG" 'msg="round completed"')
wait_log "$AGG" 'msg="round completed"' $((n + 1)) 120
sleep 1
last_version=$(podman logs "$AGG" 2>&1 | grep 'msg="round completed"' | tail -1 | sed -n 's/.* version=\([0-9]*\).*/\1/p')
podman kill "$AGG" >/dev/null
podman rm "$AGG" >/dev/null
t=$SECONDS
agg_start "$AGG_IMAGE" "$AGG"
wait_log "$AGG" 'msg="round completed"' 1 120
resume_s=$((SECONDS - t))
v=$(podman logs "$AGG" 2>&1 | grep 'msg="round completed"' | head -1 | sed -n 's/.* version=\([0-9]*\).*/\1/p')
[ "$v" = $((last_version + 1)) ] || fail "after the kill the first version is $v, not $((last_version + 1))"
say "   aggregator SIGKILLed mid-round, a new container on the same volume: a round completed $resume_s s later (version $v)"

# A region SIGKILLed and started again: it is back in a round of all three.
podman kill "$RUN-worker-eu-west" >/dev/null
podman rm "$RUN-worker-eu-west" >/dev/null
sleep 1
t=$SECONDS
worker_start eu-west "$RUN-worker-eu-west"
n=$(log_count "$AGG" 'msg="round completed"')
# (grep -c, not -q, at the end of these pipes: an early exit would fail them under pipefail)
until [ "$(podman logs "$AGG" 2>&1 | grep 'msg="round completed"' | tail -n +$((n + 1)) | grep -c 'participants=3')" -gt 0 ]; do
    [ $((SECONDS - t)) -lt 120 ] || fail "eu-west did not rejoin within 120 s"
    sleep 0.5
done
say "   region eu-west SIGKILLed and restarted: in a round of all three $((SECONDS - t)) s later"

# An upgrade: an image of a newer commit (a scratch commit of the clone: its sources are
# the same, so the build reuses the compiled layers and relinks with the new id).
git -C "$tmp/src" -c user.name=check-deploy -c user.email=check-deploy@localhost commit -q --allow-empty \
    -m "check-deploy: scratch commit for the upgrade"
commit2=$(git -C "$tmp/src" rev-parse HEAD)
AGG_IMAGE2=localhost/fedagg-aggregator:check-${commit2:0:12}-$RUN
build2_s=$(build_image aggregator "$AGG_IMAGE2" "$commit2" "$tmp/src")
run_images+=("$AGG_IMAGE2")
before=$(log_count "$AGG" 'msg="round completed"')
last_version=$(podman logs "$AGG" 2>&1 | grep 'msg="round completed"' | tail -1 | sed -n 's/.* version=\([0-9]*\).*/\1/p')
stop_s=$(stop_within "$AGG" "$AGG_GRACE")
drained "$AGG"
podman rm "$AGG" >/dev/null
t=$SECONDS
agg_start "$AGG_IMAGE2" "$AGG"
wait_log "$AGG" 'msg="round completed"' 1 120
v=$(podman logs "$AGG" 2>&1 | grep 'msg="round completed"' | head -1 | sed -n 's/.* version=\([0-9]*\).*/\1/p')
[ "$v" -gt "$last_version" ] || fail "after the upgrade the first version is $v, after $last_version"
v2=$(podman run --rm "${SEC[@]}" "$AGG_IMAGE2" fedagg-aggregator --version)
[ "$v2" = "fedagg-aggregator 0.1.0 (commit $commit2)" ] || fail "the upgraded image says '$v2'"
say "   upgrade to ${commit2:0:12} (image built in $build2_s s): old container stopped in $stop_s s (exit 0) after $before rounds, new one completed version $v $((SECONDS - t)) s after its start"

# Every daemon stops on SIGTERM with exit 0 within its grace period.
for r in "${REGIONS[@]}"; do
    s=$(stop_within "$RUN-worker-$r" "$WRK_GRACE")
    say "   podman stop $r worker: exit 0 in $s s (grace $WRK_GRACE s)"
done
s=$(stop_within "$AGG" "$AGG_GRACE")
drained "$AGG"
say "   podman stop aggregator: exit 0 in $s s (grace $AGG_GRACE s), drained"

# The audit log on the aggregator's volume, checked from outside the containers with the
# host's fedagg: every record and checkpoint; model versions without a gap.
vol=$(podman volume inspect -f '{{.Mountpoint}}' "$RUN-aggregator-state")
sed "s#\"/etc/fedagg/#\"$tmp/hosts/aggregator/etc/fedagg/#g" "$tmp/aggregator.textproto" >"$tmp/aggregator-host-paths.textproto"
"$bin/fedagg" audit verify "$vol/aggregator/audit.log" --pubkey "$keys/audit.pub" \
    --config "$tmp/aggregator-host-paths.textproto" >"$tmp/verify.log" 2>&1 ||
    fail "fedagg audit verify of the aggregator's volume: $(tail -5 "$tmp/verify.log")"
say "   audit verify (host, the volume's log): $(tail -1 "$tmp/verify.log")"
"$bin/fedagg" audit show "$vol/aggregator/audit.log" >"$tmp/show.log" 2>&1 || fail "fedagg audit show: $(tail -3 "$tmp/show.log")"
python3 - "$tmp/show.log" <<'EOF' || fail "model versions in the audit log are not contiguous"
import re, sys
steps = [(int(a), int(b)) for a, b in re.findall(r"\s(\d+)->(\d+)\s", open(sys.argv[1]).read())]
ok = bool(steps) and all(b == a + 1 for a, b in steps) and all(steps[i][0] == steps[i - 1][1] for i in range(1, len(steps)))
if not ok:
    sys.exit(f"versions {steps}")
print(f"check-deploy          versions {steps[0][0]} to {steps[-1][1]} in {len(steps)} records, no gap")
EOF
round=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $6 ~ /ap-south/ { r = $2 } END { print r }' "$tmp/show.log")
"$bin/fedagg" audit prove "$vol/aggregator/audit.log" --round "$round" --region ap-south \
    --pubkey "$keys/audit.pub" -o "$tmp/proof" >"$tmp/prove.log" 2>&1 || fail "fedagg audit prove: $(tail -3 "$tmp/prove.log")"
"$bin/fedagg" audit check-proof "$tmp/proof" --pubkey "$keys/audit.pub" --region ap-south \
    >"$tmp/check-proof.log" 2>&1 || fail "fedagg audit check-proof: $(tail -3 "$tmp/check-proof.log")"
say "   ap-south's proof of round $round checks offline: $(tail -1 "$tmp/check-proof.log")"

# ------------------------------------------------- 5. the same federation on the host
say "5. the same federation on the host (binaries of $build)"
h=$tmp/host
mkdir -p "$h/logs" "$h/state"
source "$src/deploy/fedlib.sh"
port=$(fed_free_port udp)
mport=$(fed_free_port tcp)
hostify() { # FILE -> stdout: the same configuration with this host's paths and ports
    sed -e "s#\"/etc/fedagg/#\"$tmp/hosts/HOST/etc/fedagg/#g" -e "s#\"/var/lib/fedagg/#\"$h/state/#g" \
        -e "s#\"/srv/fedagg/data/#\"$tmp/data/#g" \
        -e "s#^listen: \"0.0.0.0:4433\"#listen: \"127.0.0.1:$port\"#" \
        -e "s#^metrics_listen: \"0.0.0.0:9464\"#metrics_listen: \"127.0.0.1:$mport\"#" "$1"
}
# The host run reads its keys as root: copies of the private files, root's, 0400.
hostify "$tmp/aggregator.textproto" | sed "s#/HOST/#/aggregator/#g" >"$h/aggregator.textproto"
OPENBLAS_NUM_THREADS=1 "$bin/fedagg-aggregator" --config "$h/aggregator.textproto" >"$h/logs/aggregator.log" 2>&1 &
host_pids+=($!)
seed=1
for r in "${REGIONS[@]}"; do
    "$bin/fedagg-relay" --listen 127.0.0.1:0 --upstream "127.0.0.1:$port" "${RELAY_PROFILE[@]}" --seed "$seed" \
        --port-file "$h/relay-$r.port" >"$h/logs/relay-$r.log" 2>&1 &
    host_pids+=($!)
    seed=$((seed + 1))
done
for r in "${REGIONS[@]}"; do
    until [ -s "$h/relay-$r.port" ]; do sleep 0.05; done
    hostify "$tmp/worker-$r.textproto" | sed -e "s#/HOST/#/$r/#g" \
        -e "s#^aggregator: \"$AGG_NAME:4433\"#aggregator: \"127.0.0.1:$(cat "$h/relay-$r.port")\"#" >"$h/worker-$r.textproto"
    grep -q "^aggregator: \"127.0.0.1:" "$h/worker-$r.textproto" || fail "could not point $r at its host relay"
    OPENBLAS_NUM_THREADS=1 "$bin/fedagg-worker" --config "$h/worker-$r.textproto" >"$h/logs/worker-$r.log" 2>&1 &
    host_pids+=($!)
done
t=$SECONDS
until [ "$(grep -c 'msg="round completed"' "$h/logs/aggregator.log" || true)" -ge "$ROUNDS" ]; do
    [ $((SECONDS - t)) -lt 300 ] || fail "the host federation did not complete $ROUNDS rounds in 300 s"
    kill -0 "${host_pids[0]}" 2>/dev/null || fail "the host aggregator exited: $(tail -3 "$h/logs/aggregator.log")"
    sleep 0.5
done
host_round_s=$(grep 'msg="round completed"' "$h/logs/aggregator.log" | round_seconds)
for p in "${host_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${host_pids[@]}"; do wait "$p" 2>/dev/null || true; done
host_pids=()
ratio=$(awk -v c="$ctr_round_s" -v h="$host_round_s" 'BEGIN { printf "%.2f", c / h }')
say "   seconds per round: containers $ctr_round_s, host $host_round_s, ratio $ratio"
echo "{\"bench\":\"deploy_round\",\"rounds\":$ROUNDS,\"regions\":3,\"rtt_ms\":150,\"loss\":0.001,\"container_s\":$ctr_round_s,\"ref\":\"host\",\"ref_s\":$host_round_s,\"ratio\":$ratio}"

# ----------------------------------------------------------- 6. Kubernetes manifests
say "6. Kubernetes manifests"
source "$here/k8s-pods.sh"
k8s_checks

# ---------------------------------------------------------------------- 7. systemd
say "7. systemd units"
source "$here/systemd-units.sh"
systemd_checks

say "passed in $((SECONDS - T0)) s; images: aggregator $(mb $(($(podman image inspect -f '{{.Size}}' "$AGG_IMAGE") - base_size))) MB, region $(mb $(($(podman image inspect -f '{{.Size}}' "$REG_IMAGE") - base_size))) MB above the base; build ${build_agg_s} + ${build_reg_s} s; round ${ctr_round_s} s in containers (host ${host_round_s} s)"
