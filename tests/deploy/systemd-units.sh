# shellcheck shell=bash
# systemd-units.sh - the systemd part of check-deploy.sh (sourced; uses its variables
# and helpers).  The units of deploy/systemd start real daemons under a real systemd:
# PID 1 of a container (this machine's own PID 1 is not systemd, so systemd-run has no
# manager to talk to).  Installed as deploy/README.md's section 4a says (sysusers,
# tmpfiles, units, daemon-reload, enable --now); a federation of the aggregator and two
# regions' one-federation workers on one host completes a round; the workers stopped, the
# same two regions as region agents (fedagg-agent@) join the default federation and
# complete a round; `systemctl stop` of each unit ends it within its TimeoutStopSec, with
# the unit's result "success".

systemd_checks() {
    local s=$tmp/systemd img=localhost/fedagg-check-systemd:$tag c=$RUN-systemd r
    mkdir -p "$s"
    if ! podman build -f "$here/systemd/Containerfile" --build-arg "AGGREGATOR_IMAGE=$AGG_IMAGE" \
        --build-arg "REGION_IMAGE=$REG_IMAGE" -t "$img" "$here/systemd" >"$s/build.log" 2>&1; then
        fail "the systemd test image: $(tail -5 "$s/build.log")"
    fi
    run_images+=("$img")
    if ! podman run -d --name "$c" "${LABEL[@]}" --systemd=always --network "$RUN-central" \
        --add-host "$AGG_NAME:127.0.0.1" "$img" >"$s/run.log" 2>&1; then
        say "   SKIP: systemd does not start in a container here: $(tail -2 "$s/run.log")"
        return 0
    fi
    local state=""
    for _ in $(seq 1 60); do
        state=$(podman exec "$c" systemctl is-system-running 2>/dev/null) || true
        case $state in running | degraded) break ;; esac
        sleep 0.5
    done
    case $state in
    running | degraded) ;;
    *)
        say "   SKIP: systemd in a container did not come up (state '$state'); the units were not run"
        return 0
        ;;
    esac
    # The host's files: /etc/fedagg as section 1, the data of the two regions.
    local etc=$s/etc/fedagg
    mkdir -p "$etc/public" "$etc/private" "$s/data"
    cp "$tmp/k8s/aggregator.textproto" "$etc/aggregator.textproto"
    for r in eu-west ap-south; do
        cp "$tmp/k8s/worker-$r.textproto" "$etc/worker-$r.textproto"
        cp "$tmp/k8s/agent-$r.textproto" "$etc/agent-$r.textproto"
        cp "$pki/client-$r.crt" "$pki/client-$r.key" "$keys/$r.key" "$etc/private/"
        cp -r "$tmp/data/$r" "$s/data/$r"
    done
    cp "$pki/ca.crt" "$keys/audit.pub" "$etc/public/"
    for r in "${REGIONS[@]}"; do cp "$keys/$r.pub" "$etc/public/"; done
    cp "$pki/server.crt" "$pki/server.key" "$keys/audit.key" "$keys/quic.secret" "$etc/private/"
    # Section 4a's commands, in its order.
    podman cp "$src/deploy/systemd" "$c:/tmp/units"
    podman exec "$c" sh -ec '
        install -m 0644 /tmp/units/fedagg.sysusers.conf /usr/lib/sysusers.d/fedagg.conf
        install -m 0644 /tmp/units/fedagg.tmpfiles.conf /usr/lib/tmpfiles.d/fedagg.conf
        systemd-sysusers && systemd-tmpfiles --create' >"$s/install.log" 2>&1 ||
        fail "sysusers and tmpfiles as deploy/README.md says: $(tail -5 "$s/install.log")"
    podman cp "$etc/." "$c:/etc/fedagg/"
    podman cp "$s/data/." "$c:/srv/fedagg/data/"
    podman exec "$c" sh -ec '
        systemd-tmpfiles --create
        install -m 0644 /tmp/units/fedagg-aggregator.service /tmp/units/fedagg-worker@.service /etc/systemd/system/
        systemctl daemon-reload
        systemctl enable --now fedagg-aggregator
        systemctl enable --now fedagg-worker@eu-west fedagg-worker@ap-south' >>"$s/install.log" 2>&1 ||
        fail "installing the units as deploy/README.md says: $(tail -5 "$s/install.log")"
    local t=$SECONDS
    until [ "$(podman exec "$c" journalctl -u fedagg-aggregator --no-pager -o cat 2>/dev/null | grep -c 'msg="round completed"')" -gt 0 ]; do
        if [ $((SECONDS - t)) -ge 180 ]; then
            podman exec "$c" sh -c 'systemctl status --no-pager fedagg-aggregator fedagg-worker@eu-west | tail -20; journalctl --no-pager -n 30' >&2 || true
            fail "no round completed under systemd in 180 s"
        fi
        sleep 1
    done
    say "   units started by systemd (sysusers, tmpfiles, enable --now): a round completed $((SECONDS - t)) s later"
    unit_stop() { # UNIT: systemctl stop, result success within its TimeoutStopSec
        local t0=$SECONDS res limit
        limit=$(podman exec "$c" systemctl show -p TimeoutStopUSec --value "$1")
        podman exec "$c" systemctl stop "$1"
        res=$(podman exec "$c" systemctl show -p Result --value "$1")
        [ "$res" = success ] || fail "$1 stopped with result '$res': $(podman exec "$c" journalctl -u "$1" --no-pager -n 5)"
        say "   systemctl stop $1: result success in $((SECONDS - t0)) s (TimeoutStopSec $limit)"
    }
    unit_stop fedagg-worker@eu-west
    unit_stop fedagg-worker@ap-south
    # The same regions as region agents, section 4a's agent commands: they accept the
    # default federation (its team, trainer and dataset are their policy's) and a round
    # of the two agents' federation workers completes.
    local n0
    n0=$(podman exec "$c" journalctl -u fedagg-aggregator --no-pager -o cat | grep -c 'msg="round completed"') || true
    podman exec "$c" sh -ec '
        install -m 0644 /tmp/units/fedagg-agent@.service /etc/systemd/system/
        systemctl daemon-reload
        systemctl enable --now fedagg-agent@eu-west fedagg-agent@ap-south' >>"$s/install.log" 2>&1 ||
        fail "installing the agent unit as deploy/README.md says: $(tail -5 "$s/install.log")"
    t=$SECONDS
    until [ "$(podman exec "$c" journalctl -u fedagg-aggregator --no-pager -o cat 2>/dev/null |
        grep 'msg="round completed"' | tail -n +$((n0 + 1)) | grep -c 'participants=2')" -gt 0 ]; do
        if [ $((SECONDS - t)) -ge 180 ]; then
            podman exec "$c" sh -c 'systemctl status --no-pager fedagg-agent@eu-west | tail -20; journalctl --no-pager -n 30' >&2 || true
            fail "no round of the two agents completed under systemd in 180 s"
        fi
        sleep 1
    done
    for r in eu-west ap-south; do
        [ "$(podman exec "$c" journalctl -u "fedagg-agent@$r" --no-pager -o cat | grep -c 'msg="federation accepted".* federation=example-federation')" -gt 0 ] ||
            fail "fedagg-agent@$r did not accept the default federation: $(podman exec "$c" journalctl -u "fedagg-agent@$r" --no-pager -n 5)"
    done
    say "   fedagg-agent@eu-west and @ap-south (enable --now) accepted the default federation: a round of both completed $((SECONDS - t)) s later"
    unit_stop fedagg-agent@eu-west
    unit_stop fedagg-agent@ap-south
    unit_stop fedagg-aggregator
    # (systemd counts an end by SIGTERM itself as success too: the log says it drained)
    [ "$(podman exec "$c" journalctl -u fedagg-aggregator --no-pager -o cat | grep -c -e 'msg="signal received, draining"' -e 'msg="aggregator stopped"')" -ge 2 ] ||
        fail "fedagg-aggregator did not drain on systemctl stop: $(podman exec "$c" journalctl -u fedagg-aggregator --no-pager -n 3)"
    podman rm -f -t 5 "$c" >/dev/null
}
