// validate.mjs - every object of a rendered manifest against the Kubernetes API's
// OpenAPI schema, offline.
//
//   node validate.mjs < objects.json      (a JSON array of objects; check-deploy.sh
//                                          turns `kubectl kustomize` output into it)
//
// The schema is the one of the Kubernetes release that kubernetes-models (pinned in
// package-lock.json) was generated from: its validators are the API's OpenAPI
// definitions compiled by ajv (types, required fields, enums, formats).  The API
// server also refuses fields the schema does not know (kubectl --validate=strict,
// the default since 1.25), which plain JSON-schema validation lets through: every
// object is validated through a proxy that records which fields the validator looked
// up, and a field it never looked up is unknown to the schema (maps such as labels
// or resources.limits are enumerated by the validator, so their keys are free).
//
// A kind outside the Kubernetes API (kubeflow.org's MPIJob) has no schema here: its
// pod templates are validated as core/v1 PodTemplateSpec, and it is reported so.
// Prints one line per object; exits 1 if any object fails.
import { readFileSync } from "node:fs";

const SCHEMA_RELEASE = "1.33.0"; // kubernetes-models 4.5.1 (its changelog)

function tracked(value, path, seen) {
    if (value === null || typeof value !== "object") return value;
    let rec = seen.get(path);
    if (!rec) {
        rec = { obj: value, keys: new Set(), listed: false, array: Array.isArray(value) };
        seen.set(path, rec);
    }
    return new Proxy(value, {
        get(t, k, r) {
            if (typeof k !== "string") return Reflect.get(t, k, r);
            rec.keys.add(k);
            const v = Reflect.get(t, k, r);
            return Object.prototype.hasOwnProperty.call(t, k) ? tracked(v, `${path}/${k}`, seen) : v;
        },
        has(t, k) {
            if (typeof k === "string") rec.keys.add(k);
            return Reflect.has(t, k);
        },
        ownKeys(t) {
            rec.listed = true;
            return Reflect.ownKeys(t);
        },
    });
}

// Errors of obj against model: schema errors, then fields the schema does not know.
function check(model, obj) {
    const seen = new Map();
    const errs = [];
    try {
        model.prototype.validate.call(tracked(obj, "", seen));
    } catch (e) {
        errs.push(String(e.message || e));
    }
    for (const [path, rec] of seen) {
        if (rec.array || rec.listed) continue;
        for (const k of Object.keys(rec.obj))
            if (!rec.keys.has(k)) errs.push(`${path || "/"}: unknown field "${k}"`);
    }
    return errs;
}

async function modelFor(apiVersion, kind) {
    try {
        const mod = await import(`kubernetes-models/${apiVersion}/${kind}`);
        return mod[kind] || null;
    } catch {
        return null;
    }
}

const objs = JSON.parse(readFileSync(0, "utf8"));
const PodTemplateSpec = await modelFor("v1", "PodTemplateSpec");
let failed = 0;
for (const o of objs) {
    const name = `${o.kind} ${o.metadata?.name ?? "?"}`;
    const model = await modelFor(o.apiVersion, o.kind);
    let errs = [];
    let how = `Kubernetes ${SCHEMA_RELEASE} ${o.apiVersion} ${o.kind}`;
    if (model) {
        errs = check(model, o);
    } else if (o.kind === "MPIJob" && o.spec?.mpiReplicaSpecs) {
        how = `${o.apiVersion} is not part of the Kubernetes API: its pod templates as v1 PodTemplateSpec`;
        for (const [role, rs] of Object.entries(o.spec.mpiReplicaSpecs))
            errs.push(...check(PodTemplateSpec, rs.template).map((e) => `${role}: ${e}`));
    } else {
        errs = [`no schema for ${o.apiVersion} ${o.kind}`];
    }
    if (errs.length) {
        failed++;
        console.log(`FAIL ${name} (${how})`);
        for (const e of errs) console.log(`    ${e}`);
    } else {
        console.log(`ok   ${name} (${how})`);
    }
}
process.exit(failed ? 1 : 0);
