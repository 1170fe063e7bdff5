#!/usr/bin/env python3
"""kube_pods.py - the pod template of a rendered workload as a Pod for `podman kube play`.

  kube_pods.py pod RENDERED.yaml PREFIX > play.yaml
      The StatefulSet, Job or Deployment of RENDERED.yaml, converted mechanically: its
      pod template's spec as is (image, command, args, env, volumes, securityContext,
      probes, init containers), named PREFIX-<workload>[-0 for a StatefulSet] (one pod:
      the workloads here have one replica, and a Deployment's replicas and strategy mean
      nothing to podman); the ConfigMaps of RENDERED.yaml with it.  What has to change
      for podman, and only that:
        - every name that is global on a podman host (pod, ConfigMap, Secret, volume
          claim) gets PREFIX-, so that runs do not collide;
        - a StatefulSet's volumeClaimTemplates become the claims Kubernetes would make
          (<template>-<pod>), i.e. podman named volumes;
        - a secret volume gets `optional: false` where it leaves it out (the default):
          podman 4.3 dereferences the missing field and crashes;
        - every volume gets the pod's name in front of its own: podman 4.3 makes an
          emptyDir a named volume under the volume's name, which two pods would share;
        - init containers run with podman's type `always`, not `once`: podman 4.3 races
          removing a `once` init container that just exited and leaves the pod unstarted;
        - restartPolicy Always (a StatefulSet's or a Deployment's) becomes OnFailure:
          podman 4.3 applies the pod's policy to its init containers too, and restarts
          them for ever.
  kube_pods.py check PLAY.yaml INSPECT.json
      Compares what podman made (`podman inspect` of the pod's containers) with the
      template: prints one line per field, `honoured` or `NOT honoured` with the reason,
      and exits 1 if a field this deployment relies on (user, read-only root, dropped
      capabilities, no privilege escalation, command, env, mounts) was not honoured.
"""
import json
import sys

import yaml

WORKLOADS = ("StatefulSet", "Job", "Deployment")


def load(path):
    with open(path) as f:
        return [o for o in yaml.safe_load_all(f) if o]


def to_pod(objs, prefix):
    work = [o for o in objs if o["kind"] in WORKLOADS]
    if len(work) != 1:
        sys.exit(f"kube_pods: expected one of {WORKLOADS}, found {[o['kind'] for o in work]}")
    w = work[0]
    if w["spec"].get("replicas", 1) != 1:
        sys.exit(f"kube_pods: {w['kind']} {w['metadata']['name']} has {w['spec']['replicas']} replicas; one pod is played")
    tmpl = w["spec"]["template"]
    spec = json.loads(json.dumps(tmpl["spec"]))
    name = w["metadata"]["name"] + ("-0" if w["kind"] == "StatefulSet" else "")
    for vct in w["spec"].get("volumeClaimTemplates", []):
        claim = f"{vct['metadata']['name']}-{name}"
        spec.setdefault("volumes", []).append({"name": vct["metadata"]["name"],
                                               "persistentVolumeClaim": {"claimName": claim}})
    # (the claims get the prefix below, with the others)
    pod_name = f"{prefix}-{name}"
    for c in spec.get("initContainers", []) + spec.get("containers", []):
        for vm in c.get("volumeMounts", []):
            vm["name"] = f"{pod_name}-{vm['name']}"
    for v in spec.get("volumes", []):
        v["name"] = f"{pod_name}-{v['name']}"
        if "configMap" in v:
            v["configMap"]["name"] = f"{prefix}-{v['configMap']['name']}"
        if "secret" in v:
            v["secret"]["secretName"] = f"{prefix}-{v['secret']['secretName']}"
            v["secret"].setdefault("optional", False)
        if "persistentVolumeClaim" in v:
            v["persistentVolumeClaim"]["claimName"] = f"{prefix}-{v['persistentVolumeClaim']['claimName']}"
    if spec.get("restartPolicy", "Always") == "Always":
        spec["restartPolicy"] = "OnFailure"
    annotations = dict(tmpl.get("metadata", {}).get("annotations", {}))
    annotations["io.podman.annotations.init.container.type"] = "always"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": pod_name, "labels": tmpl.get("metadata", {}).get("labels", {}),
                        "annotations": annotations},
           "spec": spec}
    out = []
    for o in objs:
        if o["kind"] == "ConfigMap":
            o = json.loads(json.dumps(o))
            o["metadata"]["name"] = f"{prefix}-{o['metadata']['name']}"
            out.append(o)
    out.append(pod)
    return out


def check(play, inspect):
    pod = [o for o in play if o["kind"] == "Pod"][0]
    spec = pod["spec"]
    psc = spec.get("securityContext", {})
    by_name = {}
    for c in inspect:
        # podman names a pod's containers <pod>-<container>
        by_name[c["Name"][len(pod["metadata"]["name"]) + 1:]] = c
    bad = 0

    def line(field, ok, why=""):
        nonlocal bad
        print(f"   {field:<58} {'honoured' if ok else 'NOT honoured'}{(': ' + why) if why else ''}")

    def must(field, ok, why):
        nonlocal bad
        line(field, ok, "" if ok else why)
        if not ok:
            bad += 1

    for c in spec.get("initContainers", []) + spec.get("containers", []):
        got = by_name.get(c["name"])
        if got is None:
            must(f"{c['name']}: container", False, "not created")
            continue
        cfg, hc = got["Config"], got["HostConfig"]
        sc = {**psc, **c.get("securityContext", {})}
        n = c["name"]
        argv = c.get("command", []) + c.get("args", [])
        # podman 4.3 shows the command as one string, its words joined by spaces.
        ep = cfg.get("Entrypoint") or []
        ran = (ep.split(" ") if isinstance(ep, str) else list(ep)) + list(cfg.get("Cmd") or [])
        must(f"{n}: command and args", ran == argv, f"ran {ran}")
        env = {e.split("=", 1)[0]: e.split("=", 1)[1] for e in cfg.get("Env", [])}
        must(f"{n}: env", all(env.get(e["name"]) == e.get("value") for e in c.get("env", [])), "missing variables")
        if "runAsUser" in sc:
            want = f"{sc['runAsUser']}:{sc.get('runAsGroup', sc['runAsUser'])}"
            must(f"{n}: runAsUser/runAsGroup", cfg.get("User") == want, f"user {cfg.get('User')}")
        if sc.get("readOnlyRootFilesystem"):
            must(f"{n}: readOnlyRootFilesystem", hc.get("ReadonlyRootfs") is True, "writable root")
        if sc.get("capabilities", {}).get("drop") == ["ALL"]:
            must(f"{n}: capabilities drop ALL", not got.get("EffectiveCaps"), f"effective {got.get('EffectiveCaps')}")
        if sc.get("allowPrivilegeEscalation") is False:
            must(f"{n}: allowPrivilegeEscalation false", "no-new-privileges" in " ".join(hc.get("SecurityOpt") or []),
                 f"security options {hc.get('SecurityOpt')}")
        mounts = {m["Destination"]: m for m in got.get("Mounts", [])}
        want_m = [vm["mountPath"] for vm in c.get("volumeMounts", [])]
        must(f"{n}: volumeMounts", all(p in mounts for p in want_m), f"missing {[p for p in want_m if p not in mounts]}")
        ro = [vm["mountPath"] for vm in c.get("volumeMounts", []) if vm.get("readOnly")]
        must(f"{n}: readOnly mounts", all(not mounts[p].get("RW", True) for p in ro if p in mounts), "a read-only mount is writable")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in c:
                hcfg = cfg.get("Healthcheck")
                if probe == "livenessProbe" and hcfg:
                    line(f"{n}: {probe}", False, "becomes a podman healthcheck that runs curl inside the container "
                         f"({' '.join(hcfg.get('Test', [])[1:4])}...): the image has no curl, and podman schedules "
                         "healthchecks with systemd timers, which this machine cannot run")
                else:
                    line(f"{n}: {probe}", False, "podman 4.3 kube play has no readiness or startup probes; "
                         "the test checks the probed endpoints itself")
        lim = c.get("resources", {}).get("limits", {}).get("memory")
        if lim:
            line(f"{n}: resources.limits.memory {lim}", bool(hc.get("Memory")), "" if hc.get("Memory") else "no memory limit set")
        if c.get("resources", {}).get("requests"):
            line(f"{n}: resources.requests", False, "podman has no scheduler: requests mean nothing to it")
    if "terminationGracePeriodSeconds" in spec:
        g = spec["terminationGracePeriodSeconds"]
        st = [by_name[c["name"]]["Config"].get("StopTimeout") for c in spec["containers"] if c["name"] in by_name]
        line(f"terminationGracePeriodSeconds {g}", all(s == g for s in st), "" if all(s == g for s in st) else f"stop timeout {st}")
    if "fsGroup" in psc:
        line(f"securityContext.fsGroup {psc['fsGroup']}", False,
             "podman 4.3 ignores it; its named volumes are made for the container's user instead")
    types = {m.get("Name"): m.get("Type") for c in inspect for m in c.get("Mounts", [])}
    for v in spec.get("volumes", []):
        ed = v.get("emptyDir")
        if ed is None:
            continue
        kind = types.get(v["name"], "?")
        if ed.get("medium") == "Memory":
            line(f"volume {v['name']}: emptyDir medium Memory", kind == "tmpfs",
                 "" if kind == "tmpfs" else f"podman 4.3 makes a {kind} on disk (a named volume)")
        if ed.get("sizeLimit"):
            line(f"volume {v['name']}: emptyDir sizeLimit", False, f"podman 4.3 makes a {kind} without a size limit")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "pod":
        yaml.safe_dump_all(to_pod(load(sys.argv[2]), sys.argv[3]), sys.stdout, sort_keys=False)
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        with open(sys.argv[3]) as f:
            sys.exit(check(load(sys.argv[2]), json.load(f)))
    else:
        sys.exit(__doc__)
