#!/usr/bin/env bash
# it_deploy_examples.sh - the deployment files of deploy/ hold together: what can be
# checked on a host, without a container engine, a cluster or systemd running.  Running
# them is tests/deploy/check-deploy.sh's part (`make check-deploy`): the images built
# and run, a federation in containers, the manifests rendered, schema-validated and
# their pod templates run with podman, the units started by systemd.
#
#  1. deploy/examples/*.textproto and their copies in deploy/k8s pass
#     `fedagg config check --no-files`; the copies equal the examples; the
#     configurations agree with each other (federation id, regions, keys; the
#     agents' policies accept the service's federations).
#  2. The file layout they name is the one deploy/pki.sh, `fedagg keygen` and
#     `fedagg data split` produce: staged the way the Kubernetes init container
#     does it (deploy/k8s/image/stage-files.sh, from kubelet-like volumes), every
#     configuration passes `fedagg config check` WITH its files; the raw Secret
#     volume's group-readable keys are refused (why the staging exists).
#  3. The aggregator starts on this host from the example configuration, answers
#     /healthz, /readyz and /metrics where the manifests probe, the example CPU
#     worker started by the unit's ExecStart (mpirun) connects with the example PKI
#     names and downloads the model; an operator creates the example federation
#     with the example operator config; ap-south's region agent, started as its
#     unit starts it, accepts both federations, a second agent on its state
#     directory is refused, and SIGTERM stops it within its TimeoutStopSec, exit
#     0; SIGTERM drains the aggregator within the unit's TimeoutStopSec, exit 0.
#  4. Static: the systemd units pass `systemd-analyze verify` and the offline
#     security rating, their directives agree with the configurations; sysusers.d
#     and tmpfiles.d applied to a scratch root (user, key owner and mode).
#  5. Static: the Kubernetes YAML (python3-yaml) against the configurations and
#     each other: kustomizations (files, patch targets, JSON-patch tests), pod
#     security, volumes, probes and ports, the MPIJob against the image's sshd
#     settings; with kubectl, every overlay rendered and its references resolved.
set -euo pipefail

: "${FA_SRC:?FA_SRC (source tree) is required}"
: "${FA_BIN:?FA_BIN (build/bin) is required}"
D=$FA_SRC/deploy
REGIONS=(eu-west us-east ap-south)

fail() {
    echo "FAIL: $*" >&2
    exit 1
}
note() { echo "it_deploy_examples: $*"; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/it_deploy.XXXXXX")
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill -KILL "$p" 2>/dev/null || true
    done
    [ -n "${KEEP:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT

for b in fedagg fedagg-aggregator fedagg-worker; do
    [ -x "$FA_BIN/$b" ] || fail "$FA_BIN/$b is missing (build it first)"
done

# python3 with PyYAML (Debian's python3-yaml, deploy/install-deps.sh).
PY=""
for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import yaml' 2>/dev/null; then
        PY=$p
        break
    fi
done
[ -n "$PY" ] || fail "no python3 with the yaml module (apt-get install python3-yaml; deploy/install-deps.sh)"

# --------------------------------------------------------------------- 1. configs
note "1. example configurations"
check_nofiles() { # TYPE FILE
    "$FA_BIN/fedagg" config check --no-files --type "$1" "$2" >"$tmp/check.out" 2>&1 ||
        fail "fedagg config check --no-files $2: $(cat "$tmp/check.out")"
}
check_nofiles aggregator "$D/examples/aggregator.textproto"
check_nofiles worker "$D/examples/worker.textproto"
check_nofiles worker "$D/examples/worker-gpu.textproto"
check_nofiles worker "$D/examples/agent.textproto"
check_nofiles federation "$D/examples/federation.textproto"
check_nofiles operator "$D/examples/operator.textproto"
check_nofiles aggregator "$D/k8s/base/aggregator/aggregator.textproto"
check_nofiles worker "$D/k8s/overlays/eu-west-job/worker.textproto"
check_nofiles worker "$D/k8s/overlays/us-east/worker.textproto"
for r in eu-west ap-south; do
    check_nofiles worker "$D/k8s/overlays/$r/agent.textproto"
    grep -q "^$D/k8s/overlays/$r/agent.textproto: OK (region agent config" "$tmp/check.out" ||
        fail "deploy/k8s/overlays/$r/agent.textproto is not a region agent's config: $(cat "$tmp/check.out")"
done
# kustomize reads no file outside a kustomization's directory: the manifests carry copies.
cmp -s "$D/examples/aggregator.textproto" "$D/k8s/base/aggregator/aggregator.textproto" ||
    fail "deploy/k8s/base/aggregator/aggregator.textproto differs from deploy/examples/aggregator.textproto"
cmp -s "$D/examples/worker.textproto" "$D/k8s/overlays/eu-west-job/worker.textproto" ||
    fail "deploy/k8s/overlays/eu-west-job/worker.textproto differs from deploy/examples/worker.textproto"
cmp -s "$D/examples/agent.textproto" "$D/k8s/overlays/eu-west/agent.textproto" ||
    fail "deploy/k8s/overlays/eu-west/agent.textproto differs from deploy/examples/agent.textproto"
# ap-south's agent is the example with its own names (the regions list stays).
sed '/^regions {/,/^}/!s/eu-west/ap-south/g' "$D/examples/agent.textproto" | cmp -s - "$D/k8s/overlays/ap-south/agent.textproto" ||
    fail "deploy/k8s/overlays/ap-south/agent.textproto is not deploy/examples/agent.textproto with eu-west's names made ap-south's"
cmp -s "$D/examples/worker-gpu.textproto" "$D/k8s/overlays/us-east/worker.textproto" ||
    fail "deploy/k8s/overlays/us-east/worker.textproto differs from deploy/examples/worker-gpu.textproto"
# A broken file must be refused, or the checks above prove nothing.
sed 's/^federation_id: .*/federation_id: 7/' "$D/examples/aggregator.textproto" >"$tmp/bad.textproto"
if "$FA_BIN/fedagg" config check --no-files --type aggregator "$tmp/bad.textproto" >/dev/null 2>&1; then
    fail "fedagg config check accepted a broken configuration"
fi

# ------------------------------------------- 2. the layout, staged as in a pod
note "2. the /etc/fedagg layout from pki.sh, keygen and data split, staged like the init container"
root=$tmp/root
vol=$tmp/volumes
mkdir -p "$root/etc/fedagg" "$root/var/lib/fedagg" "$root/srv/fedagg" "$vol"
"$D/pki.sh" "$tmp/pki" --regions eu-west,us-east,ap-south --operators ml-ops --aggregator-name fedagg.example.org \
    >"$tmp/pki.log" 2>&1 || fail "deploy/pki.sh failed: $(cat "$tmp/pki.log")"
mkdir -p "$tmp/keys"
for k in "${REGIONS[@]}" audit; do
    "$FA_BIN/fedagg" keygen --out "$tmp/keys/$k" >/dev/null || fail "fedagg keygen $k failed"
done
(umask 077 && openssl rand -hex 32 >"$tmp/quic.secret")
"$FA_BIN/fedagg" data split --regions 3 --alpha 0.5 --seed 7 --names eu-west,us-east,ap-south \
    --out "$root/srv/fedagg/data" >"$tmp/split.log" 2>&1 || fail "fedagg data split failed: $(cat "$tmp/split.log")"

# kubelet's atomic-writer layout of a ConfigMap or Secret volume: the files in a
# timestamped directory, ..data pointing at it, one symbolic link per key; the modes a
# pod with fsGroup gets (Secret: defaultMode 0400 | 0440 = 0440, ConfigMap 0644).
# kubelet_volume NAME MODE KEY=FILE...
kubelet_volume() {
    local v=$vol/$1 mode=$2 kv
    shift 2
    mkdir -p "$v/..2026_01_01_00_00_00.000000001"
    ln -sfn "..2026_01_01_00_00_00.000000001" "$v/..data"
    for kv in "$@"; do
        cp "${kv#*=}" "$v/..data/${kv%%=*}"
        chmod "$mode" "$v/..data/${kv%%=*}"
        ln -sfn "..data/${kv%%=*}" "$v/${kv%%=*}"
    done
}
# The text a ConfigMap carries is the example; the test rewrites only the absolute
# prefixes into its own root, and the aggregator's addresses to free loopback ports.
port=$("$PY" -c 'import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
mport=$("$PY" -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
relocate() { # FILE -> stdout
    sed -e "s#\"/etc/fedagg/#\"$root/etc/fedagg/#g" -e "s#\"/var/lib/fedagg/#\"$root/var/lib/fedagg/#g" \
        -e "s#\"/srv/fedagg/#\"$root/srv/fedagg/#g" \
        -e "s#^listen: \"0.0.0.0:4433\"#listen: \"127.0.0.1:$port\"#" \
        -e "s#^metrics_listen: \"0.0.0.0:9464\"#metrics_listen: \"127.0.0.1:$mport\"#" \
        -e "s#^aggregator: \"fedagg.example.org:4433\"#aggregator: \"127.0.0.1:$port\"#" \
        -e "s#^  address: \"fedagg.example.org:4433\"#  address: \"127.0.0.1:$port\"#" "$1"
}
mkdir -p "$tmp/cm"
relocate "$D/k8s/base/aggregator/aggregator.textproto" >"$tmp/cm/aggregator.textproto"
grep -q "127.0.0.1:$port" "$tmp/cm/aggregator.textproto" || fail "could not point the example's listen at a test port"
relocate "$D/examples/worker.textproto" >"$tmp/cm/worker-eu-west.textproto"
relocate "$D/examples/worker-gpu.textproto" >"$tmp/cm/worker-us-east.textproto"
relocate "$D/examples/agent.textproto" >"$tmp/cm/agent-eu-west.textproto"
relocate "$D/k8s/overlays/ap-south/agent.textproto" >"$tmp/cm/agent-ap-south.textproto"
grep -q "address: \"127.0.0.1:$port\"" "$tmp/cm/agent-ap-south.textproto" || fail "could not point the agent example's service at a test port"
kubelet_volume config 0644 aggregator.textproto="$tmp/cm/aggregator.textproto" \
    worker-eu-west.textproto="$tmp/cm/worker-eu-west.textproto" \
    worker-us-east.textproto="$tmp/cm/worker-us-east.textproto" \
    agent-eu-west.textproto="$tmp/cm/agent-eu-west.textproto" \
    agent-ap-south.textproto="$tmp/cm/agent-ap-south.textproto"
kubelet_volume federation 0644 ca.crt="$tmp/pki/ca.crt" audit.pub="$tmp/keys/audit.pub" \
    eu-west.pub="$tmp/keys/eu-west.pub" us-east.pub="$tmp/keys/us-east.pub" ap-south.pub="$tmp/keys/ap-south.pub"
# One Secret per host in a real federation; one directory here serves all of them.
kubelet_volume private 0440 server.crt="$tmp/pki/server.crt" server.key="$tmp/pki/server.key" \
    audit.key="$tmp/keys/audit.key" quic.secret="$tmp/quic.secret" \
    client-eu-west.crt="$tmp/pki/client-eu-west.crt" client-eu-west.key="$tmp/pki/client-eu-west.key" \
    eu-west.key="$tmp/keys/eu-west.key" \
    client-us-east.crt="$tmp/pki/client-us-east.crt" client-us-east.key="$tmp/pki/client-us-east.key" \
    us-east.key="$tmp/keys/us-east.key" \
    client-ap-south.crt="$tmp/pki/client-ap-south.crt" client-ap-south.key="$tmp/pki/client-ap-south.key" \
    ap-south.key="$tmp/keys/ap-south.key"

stage=$D/k8s/image/stage-files.sh
# The daemons refuse the Secret volume's own files (group-readable under fsGroup).
mkdir -p "$tmp/raw/etc"
ln -s "$vol/private" "$tmp/raw/etc/private"
sed "s#$root/etc/fedagg/private/#$tmp/raw/etc/private/#g" "$tmp/cm/aggregator.textproto" >"$tmp/raw.textproto"
if "$FA_BIN/fedagg" config check --type aggregator "$tmp/raw.textproto" >"$tmp/raw.out" 2>&1; then
    fail "a group-readable key file (mode 0440) was accepted; the staging step would be pointless"
fi
grep -q "group or others" "$tmp/raw.out" || fail "refusal of a 0440 key does not say why: $(cat "$tmp/raw.out")"

# The init container's command, as in the manifests.
sh "$stage" "$root/etc/fedagg" "public:$vol/config" "public:$vol/federation:public" \
    "private:$vol/private:private" >"$tmp/stage.log" 2>&1 || fail "stage-files failed: $(cat "$tmp/stage.log")"
[ "$(stat -c %a "$root/etc/fedagg/private/server.key")" = 400 ] || fail "staged server.key is not mode 0400"
[ "$(stat -c %a "$root/etc/fedagg/public/ca.crt")" = 444 ] || fail "staged ca.crt is not mode 0444"
[ "$(stat -c %a "$root/etc/fedagg/aggregator.textproto")" = 444 ] || fail "staged config is not mode 0444"
[ "$(stat -c %u "$root/etc/fedagg/private/audit.key")" = "$(id -u)" ] || fail "staged audit.key is not the runner's"
[ ! -L "$root/etc/fedagg/private/server.key" ] || fail "staged server.key is a link, not a copy"
if [ -n "$(find "$root/etc/fedagg" -name '..*' -print -quit)" ]; then
    fail "kubelet's ..data bookkeeping was staged"
fi
grep -q "server.key" "$tmp/stage.log" || fail "stage-files does not say what it staged"
# Its refusals: an empty source, a subdirectory, the same file twice, an unknown kind.
mkdir -p "$tmp/empty" "$tmp/sub/dir" "$tmp/st"
expect_stage_error() { # PATTERN ARGS...
    local pat=$1
    shift
    if sh "$stage" "$@" >"$tmp/st.out" 2>&1; then
        fail "stage-files accepted: $*"
    fi
    grep -q "$pat" "$tmp/st.out" || fail "stage-files $*: expected '$pat', got: $(cat "$tmp/st.out")"
}
expect_stage_error "holds no files" "$tmp/st" "private:$tmp/empty"
expect_stage_error "not a regular file" "$tmp/st" "public:$tmp/sub"
expect_stage_error "two sources" "$tmp/st" "public:$vol/federation" "private:$vol/federation"
expect_stage_error "kind must be" "$tmp/st" "secret:$vol/federation"
expect_stage_error "not a directory" "$tmp/st" "public:$tmp/no-such-volume"
expect_stage_error "inside" "$tmp/st" "public:$vol/federation:../x"

for f in "$root"/etc/fedagg/*.textproto; do
    case $f in */aggregator.textproto) t=aggregator ;; *) t=worker ;; esac
    "$FA_BIN/fedagg" config check --type "$t" "$f" >"$tmp/check.out" 2>&1 ||
        fail "the example $t configuration with its files in place: $(cat "$tmp/check.out")"
done
# The federation an operator creates: its paths are read on the service's machine.
relocate "$D/examples/federation.textproto" >"$tmp/federation.textproto"
"$FA_BIN/fedagg" config check --type federation "$tmp/federation.textproto" >"$tmp/check.out" 2>&1 ||
    fail "the example federation with its files in place: $(cat "$tmp/check.out")"
# The operator's connection: the example's certificate paths are its workstation's.
relocate "$D/examples/operator.textproto" | sed "s#\"/home/ml-ops/.fedagg/#\"$tmp/pki/#g" >"$tmp/operator.textproto"
"$FA_BIN/fedagg" config check --type operator "$tmp/operator.textproto" >"$tmp/check.out" 2>&1 ||
    fail "the example operator config with its files in place: $(cat "$tmp/check.out")"

# --------------------------------------------------------- 3. the daemons run
note "3. aggregator and worker from the example configurations"
unit_timeout() { # UNIT -> seconds of TimeoutStopSec
    sed -n 's/^TimeoutStopSec=\([0-9]*\)s$/\1/p' "$D/systemd/$1"
}
agg_stop=$(unit_timeout fedagg-aggregator.service)
wrk_stop=$(unit_timeout fedagg-worker@.service)
agent_stop=$(unit_timeout fedagg-agent@.service)
if [ -z "$agg_stop" ] || [ -z "$wrk_stop" ] || [ -z "$agent_stop" ]; then
    fail "TimeoutStopSec=Ns not found in the units"
fi
secret_before=$(sha256sum <"$root/etc/fedagg/private/quic.secret")
OPENBLAS_NUM_THREADS=1 "$FA_BIN/fedagg-aggregator" --config "$root/etc/fedagg/aggregator.textproto" \
    >"$tmp/aggregator.log" 2>&1 &
agg=$!
pids+=("$agg")
http() { curl -s -o "$tmp/http.body" -w '%{http_code}' --max-time 5 "http://127.0.0.1:$mport$1" || true; }
ready=""
for _ in $(seq 1 300); do
    kill -0 "$agg" 2>/dev/null || fail "the aggregator exited at start: $(tail -5 "$tmp/aggregator.log")"
    [ "$(http /readyz)" = 200 ] && ready=1 && break
    sleep 0.1
done
[ -n "$ready" ] || fail "/readyz never answered 200: $(tail -5 "$tmp/aggregator.log")"
[ "$(http /healthz)" = 200 ] || fail "/healthz does not answer 200"
[ "$(http /metrics)" = 200 ] || fail "/metrics does not answer 200"
grep -q '^# TYPE ' "$tmp/http.body" || fail "/metrics is not Prometheus text"
[ "$(http /no-such-path)" = 404 ] || fail "an unknown metrics path does not get 404"
[ -d "$root/var/lib/fedagg/aggregator" ] || fail "storage.dir /var/lib/fedagg/aggregator was not created"
[ "$(sha256sum <"$root/etc/fedagg/private/quic.secret")" = "$secret_before" ] || fail "quic.secret changed"

# The worker as fedagg-worker@eu-west.service starts it: its Environment= lines and its
# ExecStart= (a shell that runs mpirun for several ranks), with FEDAGG_RANKS=2 as a .env
# file would set it.
wunit=$D/systemd/fedagg-worker@.service
cmdline=$(sed -n 's/^ExecStart=//p' "$wunit")
cmdline=${cmdline//\$\{FEDAGG_RANKS\}/2}
cmdline=${cmdline//%i/eu-west}
cmdline=${cmdline//\/usr\/local\/bin\//$FA_BIN/}
cmdline=${cmdline//\/etc\/fedagg\//$root/etc/fedagg/}
case $cmdline in
"/bin/sh -c '"*"'") script=${cmdline#/bin/sh -c \'} script=${script%\'} ;;
*) fail "the worker unit's ExecStart is not /bin/sh -c '...': $cmdline" ;;
esac
case $script in *"exec /usr/bin/mpirun -np 2 "*) ;; *) fail "FEDAGG_RANKS=2 does not run mpirun: $script" ;; esac
command -v /usr/bin/mpirun >/dev/null || fail "/usr/bin/mpirun missing (openmpi-bin)"
(
    while IFS= read -r kv; do
        export "${kv?}"
    done < <(sed -n 's/^Environment=\(.*\)$/\1/p' "$wunit" | grep -v '^FEDAGG_RANKS=')
    export OPENBLAS_NUM_THREADS=1
    # Tests run as root here; the service runs as fedagg.
    if [ "$(id -u)" = 0 ]; then
        export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    fi
    exec /bin/sh -c "$script"
) >"$tmp/worker.log" 2>&1 &
wrk=$!
pids+=("$wrk")
got=""
for _ in $(seq 1 600); do
    grep -q 'msg="global model downloaded"' "$tmp/worker.log" && got=1 && break
    kill -0 "$wrk" 2>/dev/null || fail "the worker exited: $(tail -5 "$tmp/worker.log")"
    sleep 0.1
done
[ -n "$got" ] || fail "the example worker did not download the model: $(tail -5 "$tmp/worker.log")"

# The service's other side: an operator creates the example federation.
fed_id=$(sed -n 's/^federation_id: "\(.*\)"$/\1/p' "$tmp/federation.textproto")
"$FA_BIN/fedagg" federation create "$tmp/federation.textproto" --config "$tmp/operator.textproto" \
    >"$tmp/create.out" 2>&1 || fail "fedagg federation create, as the example operator: $(cat "$tmp/create.out")"
grep -q "federation $fed_id created by ml-ops" "$tmp/create.out" || fail "federation create said: $(cat "$tmp/create.out")"
[ -f "$root/var/lib/fedagg/service/service.log" ] || fail "service.dir /var/lib/fedagg/service has no service.log"

# ap-south's region agent as fedagg-agent@ap-south.service starts it (its Environment=
# lines, its ExecStart): it accepts the default federation and the created one (the
# eu-west worker above stays the default federation's eu-west).
aunit=$D/systemd/fedagg-agent@.service
acmd=$(sed -n 's/^ExecStart=//p' "$aunit")
acmd=${acmd//%i/ap-south}
acmd=${acmd//\/usr\/local\/bin\//$FA_BIN/}
acmd=${acmd//\/etc\/fedagg\//$root/etc/fedagg/}
case $acmd in "$FA_BIN/fedagg-worker --config $root/etc/fedagg/agent-ap-south.textproto") ;;
*) fail "the agent unit's ExecStart is not fedagg-worker --config /etc/fedagg/agent-%i.textproto: $acmd" ;;
esac
agent_run() { # LOG: the unit's command with its environment, in the background
    local envs=()
    mapfile -t envs < <(sed -n 's/^Environment=\(.*\)$/\1/p' "$aunit")
    # shellcheck disable=SC2086 # the unit's command line, split as systemd does
    env "${envs[@]}" OPENBLAS_NUM_THREADS=1 $acmd >"$1" 2>&1 &
}
agent_run "$tmp/agent.log"
agent=$!
pids+=("$agent")
for f in example-federation "$fed_id"; do
    got=""
    for _ in $(seq 1 600); do
        grep -q "msg=\"federation worker started\".* federation=$f " "$tmp/agent.log" && got=1 && break
        kill -0 "$agent" 2>/dev/null || fail "the agent exited: $(tail -5 "$tmp/agent.log")"
        sleep 0.1
    done
    [ -n "$got" ] || fail "the example agent did not accept and start federation $f: $(grep proc=agent "$tmp/agent.log" | tail -5)"
done
# A second agent on the same state directory (what a Deployment's RollingUpdate would
# start): refused, and the first one goes on.
agent_run "$tmp/agent2.log"
agent2=$!
rc=0
for _ in $(seq 1 300); do kill -0 "$agent2" 2>/dev/null || break; sleep 0.1; done
kill -0 "$agent2" 2>/dev/null && fail "a second agent on the same state directory is still running"
wait "$agent2" || rc=$?
[ "$rc" != 0 ] || fail "a second agent on the same state directory exited 0"
agent2_why=$(grep -o 'error="[^"]*"' "$tmp/agent2.log" | tail -1)
case $agent2_why in *"another region agent runs with this state directory"*) ;; *) false ;; esac ||
    fail "the second agent's refusal does not say why: $(tail -3 "$tmp/agent2.log")"
kill -0 "$agent" 2>/dev/null || fail "the first agent exited when a second one started"
note "   operator created $fed_id; ap-south's agent accepted it and example-federation; a second agent on its state directory exited $rc: $(echo "${agent2_why##*: }" | tr -d '"')"

# stop PID LIMIT_S NAME: SIGTERM, exit 0 within the unit's TimeoutStopSec.
stop() {
    local pid=$1 limit=$2 name=$3 start=$SECONDS rc=0
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        [ $((SECONDS - start)) -le "$limit" ] || fail "$name still running ${limit}s after SIGTERM (TimeoutStopSec)"
        sleep 0.1
    done
    wait "$pid" || rc=$?
    [ "$rc" = 0 ] || fail "$name exited $rc after SIGTERM: $(tail -3 "$tmp/$name.log")"
}
# The agent first: it stops its federation workers and exits 0 within its unit's
# TimeoutStopSec.
t0=$SECONDS
stop "$agent" "$agent_stop" agent
grep -q 'msg="region agent stopped"' "$tmp/agent.log" || fail "the agent did not log a clean stop"
if pgrep -f "$root/var/lib/fedagg/agent-ap-south/federations/" >/dev/null; then
    fail "a federation worker of the agent outlived it: $(pgrep -af "$root/var/lib/fedagg/agent-ap-south/federations/")"
fi
note "   agent stopped in $((SECONDS - t0)) s after SIGTERM (TimeoutStopSec ${agent_stop} s), its workers with it"
# The aggregator first, with the worker's advertise long-poll in flight: the drain
# answers it and exits (an operator's stop; the workers retry until it is back).
t0=$SECONDS
stop "$agg" "$agg_stop" aggregator
note "   aggregator drained in $((SECONDS - t0)) s after SIGTERM, a long-poll in flight"
# The unit's stop: SIGTERM to mpirun (KillMode=mixed), which passes it to the ranks and
# kills those that do not end (rank 0 retrying its phase, the aggregator being gone):
# mpirun must be gone within the unit's TimeoutStopSec.
t0=$SECONDS
kill -TERM "$wrk"
while kill -0 "$wrk" 2>/dev/null; do
    [ $((SECONDS - t0)) -le "$wrk_stop" ] || fail "mpirun still running ${wrk_stop}s after SIGTERM (TimeoutStopSec)"
    sleep 0.1
done
wait "$wrk" 2>/dev/null || true
note "   worker (mpirun, 2 ranks) gone $((SECONDS - t0)) s after SIGTERM"
pids=()
grep -q 'msg="aggregator stopped"' "$tmp/aggregator.log" || fail "the aggregator did not log a clean stop"
[ -n "$(find "$root/var/lib/fedagg/aggregator" -type f -print -quit)" ] || fail "the aggregator left nothing in storage.dir"
[ -d "$root/var/lib/fedagg/worker-eu-west" ] || fail "the worker did not create its state_dir"

# ------------------------------------------------------------ 4. systemd units
note "4. systemd units (static)"
if command -v systemd-analyze >/dev/null; then
    mkdir -p "$tmp/units"
    for u in fedagg-aggregator.service fedagg-worker@.service fedagg-agent@.service; do
        # The binaries are not installed in /usr/local/bin here: point at the build.
        sed "s#/usr/local/bin/#$FA_BIN/#g" "$D/systemd/$u" >"$tmp/units/$u"
    done
    (cd "$tmp/units" && systemd-analyze verify --man=no ./fedagg-aggregator.service \
        ./fedagg-worker@eu-west.service ./fedagg-agent@eu-west.service) >"$tmp/verify.out" 2>&1 ||
        fail "systemd-analyze verify: $(cat "$tmp/verify.out")"
    [ ! -s "$tmp/verify.out" ] || fail "systemd-analyze verify warns: $(cat "$tmp/verify.out")"
    for u in fedagg-aggregator.service fedagg-worker@eu-west.service fedagg-agent@eu-west.service; do
        if (cd "$tmp/units" && systemd-analyze security --offline=yes "./$u") >"$tmp/sec.out" 2>&1; then
            level=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$tmp/sec.out")
            [ -n "$level" ] || fail "systemd-analyze security gave no exposure level for $u"
            awk -v l="$level" 'BEGIN { exit !(l <= 2.5) }' || fail "$u exposure $level > 2.5: $(grep '✗' "$tmp/sec.out")"
            note "   $u: systemd-analyze security exposure $level"
        else
            note "   systemd-analyze security --offline not supported here; skipped"
        fi
    done
else
    note "   systemd-analyze not installed (package systemd): verify skipped; directives checked below"
fi
# sysusers.d and tmpfiles.d, applied to a scratch root: the user exists, and a key copied
# in with the wrong owner and mode becomes the service user's, mode 0400.
if command -v systemd-sysusers >/dev/null && command -v systemd-tmpfiles >/dev/null; then
    fr=$tmp/fakeroot
    mkdir -p "$fr/usr/lib/sysusers.d" "$fr/usr/lib/tmpfiles.d" "$fr/etc/fedagg/private"
    cp "$D/systemd/fedagg.sysusers.conf" "$fr/usr/lib/sysusers.d/fedagg.conf"
    cp "$D/systemd/fedagg.tmpfiles.conf" "$fr/usr/lib/tmpfiles.d/fedagg.conf"
    echo key >"$fr/etc/fedagg/private/server.key"
    chmod 0644 "$fr/etc/fedagg/private/server.key"
    systemd-sysusers --root="$fr" fedagg.conf >"$tmp/sysusers.out" 2>&1 ||
        fail "systemd-sysusers: $(cat "$tmp/sysusers.out")"
    uid=$(awk -F: '$1 == "fedagg" { print $3 }' "$fr/etc/passwd")
    [ -n "$uid" ] || fail "fedagg.sysusers.conf did not create the user fedagg"
    systemd-tmpfiles --root="$fr" --create fedagg.conf >"$tmp/tmpfiles.out" 2>&1 ||
        fail "systemd-tmpfiles: $(cat "$tmp/tmpfiles.out")"
    [ "$(stat -c '%a %u' "$fr/etc/fedagg/private/server.key")" = "400 $uid" ] ||
        fail "after systemd-tmpfiles, private/server.key is $(stat -c '%a %u' "$fr/etc/fedagg/private/server.key"), not 400 fedagg"
    [ "$(stat -c '%a' "$fr/etc/fedagg/private")" = 750 ] || fail "/etc/fedagg/private is not mode 0750"
    [ -d "$fr/etc/fedagg/public" ] || fail "fedagg.tmpfiles.conf did not create /etc/fedagg/public"
fi

# ------------------------------------------------------ 5. YAML, units (static)
note "5. Kubernetes manifests and units against the configurations (static)"
kctl=""
# shellcheck disable=SC1091 # (shellcheck runs without -x here; it checks that file on its own)
source "$FA_SRC/tests/deploy/kubectl.sh"
if why=$(kubectl_renders "$tmp"); then
    for r in central eu-west eu-west-job us-east ap-south; do
        kubectl kustomize "$D/k8s/overlays/$r" >"$tmp/rendered-$r.yaml" 2>"$tmp/kustomize.err" ||
            fail "kubectl kustomize deploy/k8s/overlays/$r: $(cat "$tmp/kustomize.err")"
    done
    kctl=$tmp
else
    # make check-deploy renders them (and fails without a kubectl that can).
    note "   overlays checked structurally, NOT rendered: $why"
fi
"$PY" - "$FA_SRC" "$kctl" <<'PYEOF'
import copy, glob, json, os, re, subprocess, sys
import yaml

src, rendered_dir = sys.argv[1], sys.argv[2]
D = os.path.join(src, "deploy")
REGIONS = ["eu-west", "us-east", "ap-south"]
errors = []


def err(msg):
    errors.append(msg)


def rel(p):
    return os.path.relpath(p, src)


# ---------------------------------------------------------------- configurations
def tp_fields(path):
    """The scalar fields of a textproto (ours: one `name: value` per line), with the
    enclosing block path, and the regions list."""
    out, stack, regions = {}, [], []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"^(\w+)\s*\{$", line)
        if m:
            stack.append(m.group(1))
            if m.group(1) == "regions":
                regions.append({})
            continue
        if line == "}":
            stack.pop()
            continue
        m = re.match(r'^(\w+)\s*:\s*(.+)$', line)
        if not m:
            err(f"{rel(path)}: cannot read line {line!r}")
            continue
        key, val = m.group(1), m.group(2).strip()
        if val.startswith('"'):
            val = val[1:-1]
        if stack and stack[-1] == "regions":
            regions[-1][key] = val
        else:
            out[".".join(stack + [key])] = val
    return out, regions


agg, agg_regions = tp_fields(os.path.join(D, "examples/aggregator.textproto"))
workers = {
    "eu-west": tp_fields(os.path.join(D, "examples/worker.textproto")),
    "us-east": tp_fields(os.path.join(D, "examples/worker-gpu.textproto")),
}
agents = {
    "eu-west": tp_fields(os.path.join(D, "examples/agent.textproto")),
    "ap-south": tp_fields(os.path.join(D, "k8s/overlays/ap-south/agent.textproto")),
}
fed, fed_regions = tp_fields(os.path.join(D, "examples/federation.textproto"))
oper, _ = tp_fields(os.path.join(D, "examples/operator.textproto"))


def tp_list(v):
    """The strings of a textproto list value, ["a", "b"]."""
    return re.findall(r'"([^"]*)"', v or "")
agg_ids = [r["id"] for r in agg_regions]
if agg_ids != REGIONS:
    err(f"aggregator example regions {agg_ids} are not {REGIONS}")
for r in agg_regions:
    if r.get("identity_public_key_file") != f"/etc/fedagg/public/{r['id']}.pub":
        err(f"aggregator example: region {r['id']} key is not /etc/fedagg/public/{r['id']}.pub")
for path_field in ["tls.cert_file", "tls.key_file", "quic.static_secret_file", "audit.signing_key_file"]:
    if not agg.get(path_field, "").startswith("/etc/fedagg/private/"):
        err(f"aggregator example: {path_field} is not under /etc/fedagg/private/")
if agg.get("tls.ca_file") != "/etc/fedagg/public/ca.crt":
    err("aggregator example: tls.ca_file is not /etc/fedagg/public/ca.crt")
storage = agg.get("storage.dir", "")
if not storage.startswith("/var/lib/fedagg/"):
    err(f"aggregator storage.dir {storage} is not under /var/lib/fedagg/ (the systemd StateDirectory and the StatefulSet volume)")
listen_port = int(agg["listen"].rsplit(":", 1)[1])
metrics_port = int(agg["metrics_listen"].rsplit(":", 1)[1])
if not agg["metrics_listen"].startswith("0.0.0.0:"):
    err("aggregator metrics_listen must be reachable by the kubelet's probes (0.0.0.0)")
for region, (w, wregions) in workers.items():
    name = f"worker config of {region}"
    if w.get("region_id") != region:
        err(f"{name}: region_id is {w.get('region_id')}")
    if w.get("federation_id") != agg.get("federation_id"):
        err(f"{name}: federation_id {w.get('federation_id')} is not the aggregator's {agg.get('federation_id')}")
    if wregions != agg_regions:
        err(f"{name}: its regions list differs from the aggregator's")
    want = {
        "tls.cert_file": f"/etc/fedagg/private/client-{region}.crt",
        "tls.key_file": f"/etc/fedagg/private/client-{region}.key",
        "tls.ca_file": "/etc/fedagg/public/ca.crt",
        "identity_key_file": f"/etc/fedagg/private/{region}.key",
        "aggregator_public_key_file": "/etc/fedagg/public/audit.pub",
        "data.train_images": f"/srv/fedagg/data/{region}/train-images-idx3-ubyte.gz",
        "data.train_labels": f"/srv/fedagg/data/{region}/train-labels-idx1-ubyte.gz",
        "state_dir": f"/var/lib/fedagg/worker-{region}",
    }
    for k, v in want.items():
        if w.get(k) != v:
            err(f"{name}: {k} is {w.get(k)!r}, the layout says {v!r}")
    if int(w["aggregator"].rsplit(":", 1)[1]) != listen_port:
        err(f"{name}: aggregator port is not the aggregator's listen port {listen_port}")
    if w.get("tls.server_name") != w["aggregator"].rsplit(":", 1)[0]:
        err(f"{name}: tls.server_name differs from the aggregator host")
if agg.get("audit.signing_key_file") != "/etc/fedagg/private/audit.key":
    err("aggregator: audit.signing_key_file is not /etc/fedagg/private/audit.key (its .pub is public/audit.pub)")
if workers["us-east"][0].get("device") != "GPU" or workers["us-east"][0].get("compression.kind") != "POWERSGD":
    err("the GPU example (us-east) must use device GPU and PowerSGD")
if workers["eu-west"][0].get("device") != "CPU":
    err("the eu-west worker example must be a CPU region (it runs as a Job)")

# The service: its directory, its operators and teams, and what it offers the agents.
service_dir = agg.get("service.dir", "")
if not service_dir.startswith("/var/lib/fedagg/"):
    err(f"aggregator service.dir {service_dir!r} is not under /var/lib/fedagg/ (the unit's StateDirectory, the volume)")
operators = tp_list(agg.get("operators"))
team, team_ops = agg.get("teams.name"), tp_list(agg.get("teams.operators"))
if agg.get("team") != team:
    err(f"aggregator: the default federation's team {agg.get('team')!r} is not its team {team!r}")
m = re.fullmatch(r".*/operator-([a-z0-9-]+)\.crt", oper.get("tls.cert_file", ""))
op_name = m.group(1) if m else None
if op_name not in operators or op_name not in team_ops:
    err(f"operator example: {op_name!r} (its certificate's name) is not among the aggregator's operators and team {team!r}")
if int(oper.get("aggregator", ":0").rsplit(":", 1)[1]) != listen_port:
    err("operator example: aggregator port is not the aggregator's listen port")
if oper.get("tls.server_name") != workers["eu-west"][0].get("tls.server_name"):
    err("operator example: tls.server_name is not the name the regions dial")
if fed.get("team") != team:
    err(f"federation example: team {fed.get('team')!r} is not the service's team {team!r}")
if fed_regions != agg_regions:
    err("federation example: its regions list differs from the aggregator's")
offers = [("the default federation", agg.get("federation_id"), agg.get("team"), agg.get("trainer"), agg.get("dataset")),
          ("deploy/examples/federation.textproto", fed.get("federation_id"), fed.get("team"), fed.get("trainer"),
           fed.get("dataset"))]
# The agents: the layout, the service, and a policy that accepts what the service offers.
agent_grace = {}
for region, (a, aregions) in agents.items():
    name = f"agent config of {region}"
    if a.get("region_id") != region:
        err(f"{name}: region_id is {a.get('region_id')}")
    if aregions != agg_regions:
        err(f"{name}: its regions list differs from the aggregator's")
    want = {
        "tls.cert_file": f"/etc/fedagg/private/client-{region}.crt",
        "tls.key_file": f"/etc/fedagg/private/client-{region}.key",
        "tls.ca_file": "/etc/fedagg/public/ca.crt",
        "identity_key_file": f"/etc/fedagg/private/{region}.key",
        "services.public_key_file": "/etc/fedagg/public/audit.pub",
        "services.server_name": workers["eu-west"][0].get("tls.server_name"),
        "policy.datasets.data.train_images": f"/srv/fedagg/data/{region}/train-images-idx3-ubyte.gz",
        "policy.datasets.data.train_labels": f"/srv/fedagg/data/{region}/train-labels-idx1-ubyte.gz",
        "state_dir": f"/var/lib/fedagg/agent-{region}",
        "device": "CPU",
    }
    for k, v in want.items():
        if a.get(k) != v:
            err(f"{name}: {k} is {a.get(k)!r}, the layout says {v!r}")
    if a.get("services.address") != workers["eu-west"][0].get("aggregator"):
        err(f"{name}: services.address {a.get('services.address')!r} is not the aggregator's address")
    teams = tp_list(a.get("policy.accept_teams"))
    for what, fid, fteam, trainer, dataset in offers:
        if fteam not in teams and "*" not in teams and fid not in tp_list(a.get("policy.accept_federations")):
            err(f"{name}: its policy does not accept {what} (team {fteam!r})")
        if trainer != a.get("policy.trainers.name"):
            err(f"{name}: {what} asks for trainer {trainer!r}, the policy has {a.get('policy.trainers.name')!r}")
        if dataset != a.get("policy.datasets.name"):
            err(f"{name}: {what} asks for dataset {dataset!r}, the policy has {a.get('policy.datasets.name')!r}")
    # SIGTERM: the agent is gone within preempt_grace_s + 5 s (worker/agent.c).
    agent_grace[region] = int(a.get("preempt_grace_s", "20")) + 5

# The graceful drain the stop timeouts must cover (transport/server.c's default).
m = re.search(r"drain_timeout_ms\s*=\s*(\d+)", open(os.path.join(src, "transport/server.c")).read())
drain_s = int(m.group(1)) / 1000 if m else 30

# ------------------------------------------------------------------- systemd
def unit(path):
    d = {}
    sec = None
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            sec = line.strip("[]")
            continue
        k, _, v = line.partition("=")
        d.setdefault((sec, k), []).append(v)
    return d


def one(u, k, sec="Service"):
    v = u.get((sec, k))
    return v[-1] if v else None


def seconds(v):
    m = re.fullmatch(r"(\d+)(s|min)?", v or "")
    if not m:
        return None
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


sysusers = open(os.path.join(D, "systemd/fedagg.sysusers.conf")).read()
m = re.search(r"^u\s+(\S+)", sysusers, re.M)
sys_user = m.group(1) if m else None
for name, cfgpath, states in [
    ("fedagg-aggregator.service", "/etc/fedagg/aggregator.textproto", ["fedagg/aggregator", "fedagg/service"]),
    ("fedagg-worker@.service", "/etc/fedagg/worker-%i.textproto", ["fedagg/worker-%i"]),
    ("fedagg-agent@.service", "/etc/fedagg/agent-%i.textproto", ["fedagg/agent-%i"]),
]:
    u = unit(os.path.join(D, "systemd", name))
    where = f"deploy/systemd/{name}"
    need = {
        "User": sys_user, "Group": sys_user, "NoNewPrivileges": "yes", "ProtectSystem": "strict",
        "PrivateTmp": "yes", "CapabilityBoundingSet": "", "Restart": "on-failure",
        "KillSignal": "SIGTERM", "StateDirectory": " ".join(states), "ProtectHome": "yes",
    }
    for k, v in need.items():
        if one(u, k) != v:
            err(f"{where}: {k}={one(u, k)!r}, expected {v!r}")
    for state in states:
        if "/var/lib/" + state not in (one(u, "ReadWritePaths") or "").split():
            err(f"{where}: ReadWritePaths does not name /var/lib/{state}")
    stop = seconds(one(u, "TimeoutStopSec"))
    if stop is None or stop < drain_s + 15:
        err(f"{where}: TimeoutStopSec={one(u, 'TimeoutStopSec')} does not cover the {drain_s:.0f} s drain")
    execs = " ".join(u.get(("Service", "ExecStart"), []) + u.get(("Service", "ExecStartPre"), []))
    if execs.count(cfgpath) < 2:
        err(f"{where}: ExecStartPre (config check) and ExecStart must both use {cfgpath}")
    if "OPENBLAS_CORETYPE" not in open(os.path.join(D, "systemd", name)).read():
        err(f"{where}: no OPENBLAS_CORETYPE guidance")
agg_unit = unit(os.path.join(D, "systemd/fedagg-aggregator.service"))
agg_states = ["/var/lib/" + s for s in (one(agg_unit, "StateDirectory") or "").split()]
if storage not in agg_states:
    err(f"aggregator storage.dir {storage} is not one of the unit's StateDirectory")
if service_dir not in agg_states:
    err(f"aggregator service.dir {service_dir} is not one of the unit's StateDirectory")
agent_unit = unit(os.path.join(D, "systemd/fedagg-agent@.service"))
# SIGTERM to the agent alone: it stops its federation workers itself, then exits.
if one(agent_unit, "KillMode") != "mixed":
    err("deploy/systemd/fedagg-agent@.service: KillMode must be mixed (the agent stops its own workers)")
for region, g in agent_grace.items():
    if (seconds(one(agent_unit, "TimeoutStopSec")) or 0) < g:
        err(f"deploy/systemd/fedagg-agent@.service: TimeoutStopSec is shorter than {region}'s preempt_grace_s + 5 = {g} s")
if seconds(one(agg_unit, "TimeoutStopSec")) is None:
    err("aggregator TimeoutStopSec unreadable")
for region, (w, _) in workers.items():
    if w["state_dir"] != "/var/lib/fedagg/worker-" + region:
        err(f"worker {region}: state_dir is not fedagg-worker@{region}'s StateDirectory")
tmpfiles = open(os.path.join(D, "systemd/fedagg.tmpfiles.conf")).read()
if not re.search(r"^z\s+/etc/fedagg/private/\*\s+0[46]00\s+" + re.escape(sys_user or "?"), tmpfiles, re.M):
    err("fedagg.tmpfiles.conf does not give the private files to the service user, mode 0400/0600")

# The images' user (deploy/Dockerfile; check-deploy.sh checks the built images).
image_uid = 10001

# sshd and ssh client settings of the image, for the MPIJob.
def kv_conf(path):
    d = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line:
            k, _, v = line.partition(" ")
            d.setdefault(k.lower(), v.strip())
    return d


sshd = kv_conf(os.path.join(D, "k8s/image/sshd_config"))
sshc = kv_conf(os.path.join(D, "k8s/image/ssh_config"))
if sshd.get("port") != sshc.get("port"):
    err("deploy/k8s/image: sshd and ssh client ports differ")
if int(sshd.get("port", "22")) < 1024:
    err("deploy/k8s/image/sshd_config: a non-root sshd needs a port above 1023")
if sshd.get("usepam", "").lower() != "no":
    err("deploy/k8s/image/sshd_config: UsePAM must be no for a non-root sshd")

# ------------------------------------------------------------------ Kubernetes
K = os.path.join(D, "k8s")
docs = {}
for path in sorted(glob.glob(os.path.join(K, "**/*.yaml"), recursive=True)):
    try:
        docs[path] = [x for x in yaml.safe_load_all(open(path)) if x is not None]
    except yaml.YAMLError as e:
        err(f"{rel(path)}: YAML syntax: {e}")
KUST_KEYS = {"apiVersion", "kind", "resources", "configMapGenerator", "secretGenerator", "generatorOptions",
             "patches", "namespace", "namePrefix", "nameSuffix", "labels", "commonLabels", "commonAnnotations",
             "images", "configurations", "replicas", "replacements", "components"}


def load_kustomization(d, seen=None):
    """Resources of a kustomization directory (recursively), unpatched."""
    kpath = os.path.join(d, "kustomization.yaml")
    if not os.path.exists(kpath):
        err(f"{rel(d)}: no kustomization.yaml")
        return []
    k = yaml.safe_load(open(kpath)) or {}
    for key in k:
        if key not in KUST_KEYS:
            err(f"{rel(kpath)}: unknown field {key!r}")
    res = []
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(d, r))
        if os.path.isdir(p):
            res += load_kustomization(p)
        elif os.path.isfile(p):
            res += [x for x in yaml.safe_load_all(open(p)) if x is not None]
        else:
            err(f"{rel(kpath)}: resource {r} does not exist")
    for g in k.get("configMapGenerator", []) + k.get("secretGenerator", []):
        for f in g.get("files", []):
            f = f.split("=", 1)[-1]
            if not os.path.isfile(os.path.join(d, f)):
                err(f"{rel(kpath)}: generator file {f} does not exist")
            elif os.path.realpath(os.path.join(d, f)) != os.path.abspath(os.path.join(d, f)):
                err(f"{rel(kpath)}: generator file {f} is a link (kustomize refuses files outside the directory)")
    for c in k.get("configurations", []):
        if not os.path.isfile(os.path.join(d, c)):
            err(f"{rel(kpath)}: configurations file {c} does not exist")
    for p in k.get("patches", []):
        body = p.get("patch") or (open(os.path.join(d, p["path"])).read() if "path" in p else None)
        if body is None:
            err(f"{rel(kpath)}: a patch without patch or path")
            continue
        patch = yaml.safe_load(body)
        if isinstance(patch, list):  # JSON 6902
            t = p.get("target", {})
            targets = [r for r in res if r.get("kind") == t.get("kind") and r["metadata"]["name"] == t.get("name")]
            if len(targets) != 1:
                err(f"{rel(kpath)}: JSON patch target {t} matches {len(targets)} resources")
                continue
            doc = copy.deepcopy(targets[0])
            for op in patch:
                parts = [x.replace("~1", "/").replace("~0", "~") for x in op["path"].split("/")[1:]]
                cur = doc
                try:
                    for x in parts[:-1]:
                        cur = cur[int(x)] if isinstance(cur, list) else cur[x]
                    last = parts[-1]
                    if op["op"] == "test":
                        val = cur[int(last)] if isinstance(cur, list) else cur[last]
                        if val != op["value"]:
                            err(f"{rel(kpath)}: JSON patch test {op['path']} is {val!r}, not {op['value']!r}")
                    elif op["op"] == "replace":
                        (cur[int(last)] if isinstance(cur, list) else cur[last])
                except (KeyError, IndexError, ValueError, TypeError):
                    err(f"{rel(kpath)}: JSON patch path {op['path']} does not exist in {t.get('kind')} {t.get('name')}")
        else:
            kind, name = patch.get("kind"), patch.get("metadata", {}).get("name")
            if not any(r.get("kind") == kind and r["metadata"]["name"] == name for r in res):
                err(f"{rel(kpath)}: patch target {kind} {name} is not among its resources")
            if kind == "MPIJob":
                err(f"{rel(kpath)}: a strategic merge patch on an MPIJob replaces whole lists (no schema); use a JSON patch")
    return res


def pod_specs(obj):
    """(where, pod spec, pod template metadata) of a workload."""
    kind = obj.get("kind")
    name = obj["metadata"]["name"]
    if kind in ("StatefulSet", "Job", "Deployment"):
        yield f"{kind} {name}", obj["spec"]["template"]["spec"], obj["spec"]["template"].get("metadata", {})
    elif kind == "MPIJob":
        for role, rs in obj["spec"]["mpiReplicaSpecs"].items():
            yield f"MPIJob {name} {role}", rs["template"]["spec"], rs["template"].get("metadata", {})


def check_pod(where, spec, obj, out_of_band):
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    if len(vols) != len(spec.get("volumes", [])):
        err(f"{where}: duplicate volume names")
    claims = {t["metadata"]["name"] for t in obj.get("spec", {}).get("volumeClaimTemplates", [])}
    sc = spec.get("securityContext", {})
    if sc.get("runAsNonRoot") is not True or sc.get("runAsUser") != image_uid:
        err(f"{where}: pod must run as non-root uid {image_uid} (the image's USER)")
    if any("persistentVolumeClaim" in v for v in vols.values()) or claims:
        if sc.get("fsGroup") != image_uid:
            err(f"{where}: a pod with a volume claim needs fsGroup {image_uid}")
    for v in vols.values():
        if "secret" in v and v["secret"].get("defaultMode") != 0o400:
            err(f"{where}: Secret volume {v['name']} must have defaultMode 0400")
        for kind, key in (("configMap", "name"), ("secret", "secretName")):
            if kind in v and v[kind][key] not in out_of_band[kind]:
                err(f"{where}: {kind} {v[kind][key]} is neither generated here nor a documented out-of-band name")
    containers = spec.get("initContainers", []) + spec["containers"]
    for c in containers:
        cw = f"{where} container {c['name']}"
        csc = c.get("securityContext", {})
        if csc.get("allowPrivilegeEscalation") is not False or csc.get("readOnlyRootFilesystem") is not True \
                or csc.get("capabilities", {}).get("drop") != ["ALL"]:
            err(f"{cw}: needs allowPrivilegeEscalation false, readOnlyRootFilesystem true, drop ALL")
        if "limits" not in c.get("resources", {}) or "memory" not in c["resources"]["limits"]:
            err(f"{cw}: no memory limit")
        for vm in c.get("volumeMounts", []):
            if vm["name"] not in vols and vm["name"] not in claims:
                err(f"{cw}: mounts {vm['name']}, which is not a volume")
    mounts_of = lambda c: {vm["mountPath"]: vm for vm in c.get("volumeMounts", [])}
    return vols, containers, mounts_of


def check_fedagg_pod(where, spec, obj, cfg_path, cfg, out_of_band):
    vols, containers, mounts_of = check_pod(where, spec, obj, out_of_band)
    inits = {c["name"]: c for c in spec.get("initContainers", [])}
    st = inits.get("stage-files")
    if not st:
        err(f"{where}: no stage-files init container")
        return None
    stage_bin = "/usr/local/bin/fedagg-stage-files"
    if st["command"][0] != stage_bin:
        err(f"{where}: stage-files runs {st['command'][0]}, the image installs it at {stage_bin}")
    if st["command"][1] != "/etc/fedagg":
        err(f"{where}: stage-files destination is not /etc/fedagg")
    stm = mounts_of(st)
    if stm.get("/etc/fedagg", {}).get("readOnly"):
        err(f"{where}: stage-files cannot write /etc/fedagg")
    for specarg in st["command"][2:]:
        kind, srcdir = specarg.split(":")[:2]
        if srcdir not in stm:
            err(f"{where}: stage-files reads {srcdir}, which it does not mount")
        if kind == "private" and vols.get(stm.get(srcdir, {}).get("name"), {}).get("secret") is None:
            err(f"{where}: private files from {srcdir} do not come from a Secret")
    etc = vols.get(stm.get("/etc/fedagg", {}).get("name"), {})
    if etc.get("emptyDir", {}).get("medium") != "Memory":
        err(f"{where}: /etc/fedagg must be an in-memory emptyDir (secrets never on the node's disk)")
    cc = inits.get("config-check")
    if not cc or cc["command"][:3] != ["/usr/local/bin/fedagg", "config", "check"] or cc["command"][-1] != cfg_path:
        err(f"{where}: no config-check init container on {cfg_path}")
    main = spec["containers"][0]
    mm = mounts_of(main)
    if not mm.get("/etc/fedagg", {}).get("readOnly"):
        err(f"{where}: the main container must mount /etc/fedagg read-only")
    return main, mm, mounts_of


def under(path, mounts):
    return any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounts)


# base/aggregator
base_agg = load_kustomization(os.path.join(K, "base/aggregator"))
oob_agg = {"configMap": {"fedagg-aggregator-config", "fedagg-federation"}, "secret": {"fedagg-aggregator"}}
sts = [r for r in base_agg if r["kind"] == "StatefulSet"]
svcs = {r["metadata"]["name"]: r for r in base_agg if r["kind"] == "Service"}
if len(sts) != 1:
    err("base/aggregator: expected one StatefulSet")
else:
    s = sts[0]
    spec = s["spec"]["template"]["spec"]
    where = "base/aggregator StatefulSet"
    if s["spec"].get("replicas") != 1:
        err(f"{where}: the aggregator is a single writer: replicas must be 1")
    if s["spec"].get("persistentVolumeClaimRetentionPolicy", {}).get("whenDeleted") != "Retain":
        err(f"{where}: the storage volume must be retained when the StatefulSet is deleted")
    r = check_fedagg_pod(where, spec, s, "/etc/fedagg/aggregator.textproto", agg, oob_agg)
    if r:
        main, mm, mounts_of = r
        if main["command"] != ["/usr/local/bin/fedagg-aggregator", "--config", "/etc/fedagg/aggregator.textproto"]:
            err(f"{where}: unexpected command {main['command']}")
        ports = {p["name"]: p for p in main.get("ports", [])}
        if ports.get("h3", {}).get("containerPort") != listen_port or ports.get("h3", {}).get("protocol") != "UDP":
            err(f"{where}: port h3 must be UDP {listen_port} (listen)")
        if ports.get("metrics", {}).get("containerPort") != metrics_port or ports.get("metrics", {}).get("protocol", "TCP") != "TCP":
            err(f"{where}: port metrics must be TCP {metrics_port} (metrics_listen)")
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
            g = main.get(probe, {}).get("httpGet", {})
            if g.get("path") != path or g.get("port") not in ("metrics", metrics_port):
                err(f"{where}: {probe} must GET {path} on the metrics port")
        state_mounts = [m for m, vm in mm.items() if vm["name"] in {t["metadata"]["name"] for t in s["spec"]["volumeClaimTemplates"]}]
        if not any(under(storage, [m]) for m in state_mounts):
            err(f"{where}: storage.dir {storage} is not on the volume claim")
        grace = spec.get("terminationGracePeriodSeconds", 30)
        if grace < drain_s + 15:
            err(f"{where}: terminationGracePeriodSeconds {grace} does not cover the {drain_s:.0f} s drain")
        labels = s["spec"]["template"]["metadata"]["labels"]
        if s["spec"]["selector"]["matchLabels"] != labels:
            err(f"{where}: selector does not match the pod labels")
        gov = svcs.get(s["spec"]["serviceName"])
        if not gov or gov["spec"].get("clusterIP") != "None":
            err(f"{where}: serviceName {s['spec']['serviceName']} is not a headless Service of the base")
        protos = {}
        for svc in svcs.values():
            if any(labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
                err(f"Service {svc['metadata']['name']}: selector does not match the aggregator pods")
            for p in svc["spec"]["ports"]:
                if p.get("targetPort") not in ports:
                    err(f"Service {svc['metadata']['name']}: targetPort {p.get('targetPort')} is not a container port")
                elif p.get("protocol", "TCP") != ports[p["targetPort"]].get("protocol", "TCP"):
                    err(f"Service {svc['metadata']['name']}: port {p['name']} protocol differs from the container's")
                protos.setdefault(svc["metadata"]["name"], set()).add(p.get("protocol", "TCP"))
        if not any(p == {"UDP", "TCP"} for p in protos.values()):
            err("base/aggregator: no Service exposes both UDP (HTTP/3) and TCP (metrics)")
        if not any(svc["spec"].get("type") == "LoadBalancer" and protos[n] == {"UDP"} for n, svc in svcs.items()):
            err("base/aggregator: no UDP LoadBalancer Service for the regions")

# base/worker (Job) and base/worker-mpi (MPIJob), through their overlays' configs.
def check_worker_pod(where, spec, obj, wcfg, region, cfg_path="/etc/fedagg/worker.textproto",
                     config_map="fedagg-worker-config"):
    oob = {"configMap": {config_map, "fedagg-federation"}, "secret": {"fedagg-worker"}}
    r = check_fedagg_pod(where, spec, obj, cfg_path, wcfg, oob)
    if not r:
        return None
    main, mm, _ = r
    data = wcfg.get("data.train_images") or wcfg.get("policy.datasets.data.train_images")
    if not under(data, [m for m, vm in mm.items() if vm.get("readOnly")]):
        err(f"{where}: data {data} is not on a read-only mount")
    if not under(wcfg["state_dir"], [m for m, vm in mm.items() if not vm.get("readOnly")]):
        err(f"{where}: state_dir {wcfg['state_dir']} is not on a writable mount")
    return main


base_job = load_kustomization(os.path.join(K, "base/worker"))
jobs = [r for r in base_job if r["kind"] == "Job"]
if len(jobs) != 1:
    err("base/worker: expected one Job")
else:
    j = jobs[0]
    spec = j["spec"]["template"]["spec"]
    main = check_worker_pod("base/worker Job", spec, j, workers["eu-west"][0], "eu-west")
    if main and main["command"] != ["/usr/local/bin/fedagg-worker", "--config", "/etc/fedagg/worker.textproto"]:
        err(f"base/worker Job: unexpected command {main['command']}")
    if spec.get("restartPolicy") not in ("OnFailure", "Never"):
        err("base/worker Job: restartPolicy must be OnFailure or Never")
    if spec.get("terminationGracePeriodSeconds", 30) < 30:
        err("base/worker Job: terminationGracePeriodSeconds below 30")

# base/agent: the region agent, long-lived.
base_agent = load_kustomization(os.path.join(K, "base/agent"))
deps = [r for r in base_agent if r["kind"] == "Deployment"]
pvcs = {r["metadata"]["name"]: r for r in base_agent if r["kind"] == "PersistentVolumeClaim"}
if len(deps) != 1:
    err("base/agent: expected one Deployment")
else:
    dp = deps[0]
    where = "base/agent Deployment"
    spec = dp["spec"]["template"]["spec"]
    if dp["spec"].get("replicas") != 1:
        err(f"{where}: one agent per state directory: replicas must be 1")
    if dp["spec"].get("strategy", {}).get("type") != "Recreate":
        err(f"{where}: strategy must be Recreate (a RollingUpdate starts the new agent while the old one holds the state directory)")
    labels = dp["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in dp["spec"]["selector"]["matchLabels"].items()):
        err(f"{where}: selector does not match the pod labels")
    if spec.get("restartPolicy", "Always") != "Always":
        err(f"{where}: a Deployment's pods restart Always")
    grace = spec.get("terminationGracePeriodSeconds", 30)
    for region, g in agent_grace.items():
        if grace < g:
            err(f"{where}: terminationGracePeriodSeconds {grace} is shorter than {region}'s preempt_grace_s + 5 = {g} s")
    main = check_worker_pod(where, spec, dp, agents["eu-west"][0], "eu-west", "/etc/fedagg/agent.textproto",
                            "fedagg-agent-config")
    if main:
        if main["command"] != ["/usr/local/bin/fedagg-worker", "--config", "/etc/fedagg/agent.textproto"]:
            err(f"{where}: unexpected command {main['command']}")
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        sd = agents["eu-west"][0]["state_dir"]
        at = [vm for vm in main.get("volumeMounts", []) if under(sd, [vm["mountPath"]]) and not vm.get("readOnly")]
        claim = vols.get(at[0]["name"], {}).get("persistentVolumeClaim", {}).get("claimName") if at else None
        if claim not in pvcs:
            err(f"{where}: state_dir {sd} is not on a volume claim of the base")
        elif pvcs[claim]["spec"].get("accessModes") != ["ReadWriteOnce"]:
            err(f"{where}: the state claim {claim} must be ReadWriteOnce (one agent, one node)")
        elif claim == "fedagg-state":
            err(f"{where}: the agent's state claim must not be the one-federation worker's fedagg-state")

base_mpi = load_kustomization(os.path.join(K, "base/worker-mpi"))
mpis = [r for r in base_mpi if r["kind"] == "MPIJob"]
if len(mpis) != 1:
    err("base/worker-mpi: expected one MPIJob")
else:
    mj = mpis[0]
    where = "base/worker-mpi MPIJob"
    if mj["apiVersion"] != "kubeflow.org/v2beta1":
        err(f"{where}: apiVersion must be kubeflow.org/v2beta1")
    rs = mj["spec"]["mpiReplicaSpecs"]
    if set(rs) != {"Launcher", "Worker"}:
        err(f"{where}: replica specs must be Launcher and Worker")
    slots = mj["spec"].get("slotsPerWorker")
    wspec = rs["Worker"]["template"]["spec"]
    wmain = check_worker_pod(f"{where} Worker", wspec, mj, workers["us-east"][0], "us-east")
    lspec = rs["Launcher"]["template"]["spec"]
    check_pod(f"{where} Launcher", lspec, mj, {"configMap": set(), "secret": set()})
    if wmain:
        gpus = wmain.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
        if gpus != slots:
            err(f"{where}: nvidia.com/gpu {gpus} != slotsPerWorker {slots} (one rank per GPU)")
        if wmain["command"][:1] != ["/usr/sbin/sshd"] or "/etc/ssh/fedagg_sshd_config" not in wmain["command"]:
            err(f"{where}: the Worker's first container must run the image's sshd (/etc/ssh/fedagg_sshd_config)")
        port = {p["name"]: p["containerPort"] for p in wmain.get("ports", [])}.get(
            wmain.get("readinessProbe", {}).get("tcpSocket", {}).get("port"))
        if str(port) != sshd.get("port"):
            err(f"{where}: the Worker's readiness port {port} is not sshd's {sshd.get('port')}")
        if "/dev/shm" not in {vm["mountPath"] for vm in wmain.get("volumeMounts", [])}:
            err(f"{where}: NCCL needs a larger /dev/shm (an in-memory emptyDir)")
    home = mj["spec"].get("sshAuthMountPath")
    if os.path.dirname(sshd.get("hostkey", "")) != home or os.path.dirname(sshd.get("authorizedkeysfile", "")) != home:
        err(f"{where}: sshAuthMountPath {home} is not where the image's sshd reads its keys")
    lc = rs["Launcher"]["template"]["spec"]["containers"][0]
    argv = lc.get("command", []) + lc.get("args", [])
    if argv[:1] != ["mpirun"] or "-np" not in argv:
        err(f"{where}: the Launcher must run mpirun -np N")
    else:
        np_ = int(argv[argv.index("-np") + 1])
        if np_ != slots * rs["Worker"].get("replicas", 1):
            err(f"{where}: mpirun -np {np_} != slotsPerWorker x Worker replicas")
        if argv[-3:] != ["/usr/local/bin/fedagg-worker", "--config", "/etc/fedagg/worker.textproto"]:
            err(f"{where}: mpirun must start /usr/local/bin/fedagg-worker --config /etc/fedagg/worker.textproto")

# Overlays: the central aggregator, the CPU regions' agents, eu-west's one-federation Job
# (kept for regions that want it), the GPU region's MPIJob.
OVERLAYS = {
    "central": None,
    "eu-west": ("eu-west", "base/agent", "agent.textproto", "fedagg-agent-config"),
    "ap-south": ("ap-south", "base/agent", "agent.textproto", "fedagg-agent-config"),
    "eu-west-job": ("eu-west", "base/worker", "worker.textproto", "fedagg-worker-config"),
    "us-east": ("us-east", "base/worker-mpi", "worker.textproto", "fedagg-worker-config"),
}
have_ov = sorted(os.listdir(os.path.join(K, "overlays")))
if have_ov != sorted(OVERLAYS):
    err(f"deploy/k8s/overlays holds {have_ov}; this test checks {sorted(OVERLAYS)}")
for ov, what in OVERLAYS.items():
    d = os.path.join(K, "overlays", ov)
    k = yaml.safe_load(open(os.path.join(d, "kustomization.yaml")))
    load_kustomization(d)
    if k.get("namespace") != "fedagg":
        err(f"overlays/{ov}: namespace must be fedagg")
    if not any(i.get("name") == "fedagg" and i.get("newName") for i in k.get("images", [])):
        err(f"overlays/{ov}: no image for fedagg")
    if what is None:
        continue
    region, want_base, cfg_name, cm = what
    if k.get("nameSuffix") != "-" + region:
        err(f"overlays/{ov}: nameSuffix must be -{region}")
    ocfg = tp_fields(os.path.join(d, cfg_name))[0]
    if ocfg.get("region_id") != region:
        err(f"overlays/{ov}: {cfg_name} is for region {ocfg.get('region_id')}")
    gens = {g["name"]: g.get("files", []) for g in k.get("configMapGenerator", [])}
    if gens.get(cm) != [cfg_name]:
        err(f"overlays/{ov}: ConfigMap {cm} must be generated from {cfg_name}")
    text = open(os.path.join(d, "kustomization.yaml")).read()
    if f"fedagg-worker-{region}\n" not in text:
        err(f"overlays/{ov}: does not name the region's Secret fedagg-worker-{region}")
    base = [os.path.normpath(os.path.join(d, r)) for r in k["resources"]]
    if want_base != "base/agent" and ocfg.get("device") == "GPU":
        want_base = "base/worker-mpi"
    if base != [os.path.join(K, want_base)]:
        err(f"overlays/{ov}: should build on {want_base}")
    if want_base == "base/agent" and not any(
            lab.get("includeSelectors") and "fedagg.io/region" in lab.get("pairs", {}) for lab in k.get("labels", [])):
        err(f"overlays/{ov}: the region label must be in the Deployment's selector (two regions' agents in one namespace)")

# Rendered overlays (kubectl kustomize): every reference resolves.
if rendered_dir:
    for ov, what in OVERLAYS.items():
        objs = [x for x in yaml.safe_load_all(open(os.path.join(rendered_dir, f"rendered-{ov}.yaml"))) if x]
        have = {(o["kind"], o["metadata"]["name"]) for o in objs}
        secret = "fedagg-aggregator" if what is None else f"fedagg-worker-{what[0]}"
        for o in objs:
            if o["metadata"].get("namespace") != "fedagg":
                err(f"rendered {ov}: {o['kind']} {o['metadata']['name']} has no namespace fedagg")
            for where, spec, _ in pod_specs(o):
                where = f"rendered {ov}: {where}"
                claims = {t["metadata"]["name"] for t in o["spec"].get("volumeClaimTemplates", [])}
                for v in spec.get("volumes", []):
                    if "configMap" in v and v["configMap"]["name"] != "fedagg-federation" and \
                            ("ConfigMap", v["configMap"]["name"]) not in have:
                        err(f"{where}: ConfigMap {v['configMap']['name']} is not rendered")
                    if "persistentVolumeClaim" in v and \
                            ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]) not in have:
                        err(f"{where}: claim {v['persistentVolumeClaim']['claimName']} is not rendered")
                    if "secret" in v and v["secret"]["secretName"] != secret:
                        err(f"{where}: Secret {v['secret']['secretName']}, expected {secret}")
                if "Launcher" not in where:
                    names = {v["name"] for v in spec.get("volumes", [])} | claims
                    for c in spec.get("initContainers", []) + spec["containers"]:
                        for vm in c.get("volumeMounts", []):
                            if vm["name"] not in names:
                                err(f"{where}: {c['name']} mounts {vm['name']}, which is not a volume")
                for c in spec.get("initContainers", []) + spec["containers"]:
                    if not c["image"].startswith("registry.example.org/"):
                        err(f"{where}: {c['name']} image {c['image']} was not set by the overlay")

if errors:
    for e in errors:
        print("FAIL:", e, file=sys.stderr)
    sys.exit(1)
print("it_deploy_examples: YAML, units and configurations agree (static)")
PYEOF

# ------------------------------------------------------------- optional linters
if command -v shellcheck >/dev/null; then
    shellcheck "$stage" "$FA_SRC/tests/integration/it_deploy_examples.sh" "$FA_SRC/tests/deploy/kubectl.sh" \
        >"$tmp/sc.out" 2>&1 ||
        fail "shellcheck: $(cat "$tmp/sc.out")"
fi
if [ -x /usr/sbin/sshd ]; then
    ssh-keygen -q -t ed25519 -N '' -f "$tmp/hostkey"
    sed "s#^HostKey .*#HostKey $tmp/hostkey#" "$D/k8s/image/sshd_config" >"$tmp/sshd_config"
    /usr/sbin/sshd -t -f "$tmp/sshd_config" >"$tmp/sshd.out" 2>&1 || fail "sshd -t: $(cat "$tmp/sshd.out")"
fi
echo "it_deploy_examples: all checks passed"
