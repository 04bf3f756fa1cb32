// tests/deploy/k8s/validate.mjs SOURCE_DIR GRAPHSERVE - deploy/kubernetes/
// validated offline against the Kubernetes API schemas bundled in the
// kubernetes-models package (generated from the Kubernetes OpenAPI spec;
// version pinned in package.json), plus what the schema cannot know:
//
// - every document's apiVersion/kind is a known API type and the object
//   passes that type's JSON-schema validation (types, required fields,
//   enums, formats);
// - strict field names: the schemas allow unknown fields (as the API server
//   does by default, dropping them), so a misspelt `livenesProbe` would pass;
//   field names are checked against the typed interfaces of the same package;
// - both checks can fail: a wrong type and a misspelt field are refused;
// - the ConfigMap's graphserve.json passes `graphserve config check`, and the
//   container's args are options graphserve accepts;
// - probes use /health (liveness) and /ready (readiness); the grace period
//   outlasts drain_timeout_s; memory covers at least the KV pool + 1 GiB;
// - the HPA's metrics are the ones the prometheus-adapter rules expose, and
//   those rules query series graphserve's /metrics writes;
// - custom resources (InferencePool, HTTPRoute) validate against the v1
//   openAPIV3Schema of their own CRDs, vendored in crds/ (a file names its
//   release), with unknown fields refused as a structural schema prunes them;
//   the CEL rules (x-kubernetes-validations) are not evaluated;
// - the InferencePool selects the Deployment's pods on its container port, the
//   HTTPRoute sends to the pool, the metric names its comment gives the picker
//   are series graphserve writes, and /metrics is open to the keyless picker.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import yaml from "js-yaml";

const [srcDir, graphserve] = process.argv.slice(2);
const require = createRequire(import.meta.url);
const modelsDir = path.dirname(require.resolve("kubernetes-models/package.json"));
const nodeModules = path.dirname(modelsDir);
let passed = 0, failed = 0;
function check(ok, what, detail = "") {
    if (ok) { passed++; console.log("ok   " + what); }
    else { failed++; console.log("FAIL " + what + (detail ? "\n     " + String(detail).replace(/\n/g, "\n     ") : "")); }
    return ok;
}

// ---- schema validation ----------------------------------------------------
function modulePath(apiVersion, kind) {
    const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : [null, apiVersion];
    return path.join(modelsDir, group ? group : "", version, kind + ".mjs");
}

async function schemaErrors(doc) {
    const file = modulePath(doc.apiVersion, doc.kind);
    if (!fs.existsSync(file)) return `unknown apiVersion/kind ${doc.apiVersion} ${doc.kind}`;
    const mod = await import(file);
    try { new mod[doc.kind](doc).validate(); return null; } catch (e) { return e.message; }
}

// ---- custom resources against their CRDs' structural schemas ----------------
const crdDir = path.join(path.dirname(new URL(import.meta.url).pathname), "crds");
const crds = new Map();
for (const f of fs.readdirSync(crdDir).filter(f => f.endsWith(".json"))) {
    const c = JSON.parse(fs.readFileSync(path.join(crdDir, f), "utf8"));
    crds.set(`${c.group}/${c.version} ${c.kind}`, c.schema);
}
// The keywords a CRD's structural schema uses (type, properties, required, enum, pattern,
// lengths, bounds, items, additionalProperties, property counts); defaults, formats and
// list-type markers change nothing a manifest says.
function crdErrors(v, sc, where, out) {
    const t = Array.isArray(v) ? "array" : v === null ? "null" : typeof v;
    if (sc["x-kubernetes-int-or-string"]) {
        if (!Number.isInteger(v) && t !== "string") out.push(`${where}: not an integer or string`);
        return;
    }
    const want = { object: "object", array: "array", string: "string", boolean: "boolean",
                   integer: "number", number: "number" }[sc.type];
    if (want && t !== want) { out.push(`${where}: ${t}, not ${sc.type}`); return; }
    if (sc.type === "integer" && !Number.isInteger(v)) out.push(`${where}: not an integer`);
    if (sc.enum && !sc.enum.includes(v)) out.push(`${where}: ${JSON.stringify(v)} not in ${sc.enum}`);
    if (t === "string") {
        if (sc.pattern && !new RegExp(sc.pattern).test(v)) out.push(`${where}: '${v}' does not match ${sc.pattern}`);
        if (sc.minLength !== undefined && v.length < sc.minLength) out.push(`${where}: shorter than ${sc.minLength}`);
        if (sc.maxLength !== undefined && v.length > sc.maxLength) out.push(`${where}: longer than ${sc.maxLength}`);
    }
    if (t === "number") {
        if (sc.minimum !== undefined && v < sc.minimum) out.push(`${where}: below ${sc.minimum}`);
        if (sc.maximum !== undefined && v > sc.maximum) out.push(`${where}: above ${sc.maximum}`);
    }
    if (t === "array") {
        if (sc.minItems !== undefined && v.length < sc.minItems) out.push(`${where}: fewer than ${sc.minItems} items`);
        if (sc.maxItems !== undefined && v.length > sc.maxItems) out.push(`${where}: more than ${sc.maxItems} items`);
        if (sc.items) v.forEach((e, i) => crdErrors(e, sc.items, `${where}/${i}`, out));
    }
    if (t === "object" && (sc.properties || sc.additionalProperties)) {
        const n = Object.keys(v).length;
        if (sc.minProperties !== undefined && n < sc.minProperties) out.push(`${where}: fewer than ${sc.minProperties} fields`);
        if (sc.maxProperties !== undefined && n > sc.maxProperties) out.push(`${where}: more than ${sc.maxProperties} fields`);
        for (const r of sc.required ?? []) if (!(r in v)) out.push(`${where}/${r}: required`);
        for (const [k, e] of Object.entries(v)) {
            const sub = sc.properties?.[k] ?? (typeof sc.additionalProperties === "object" ? sc.additionalProperties : null);
            if (sub) crdErrors(e, sub, `${where}/${k}`, out);
            else if (!sc["x-kubernetes-preserve-unknown-fields"]) out.push(`${where}/${k}: unknown field`);
        }
    }
}
function crdCheck(doc) {
    const sc = crds.get(`${doc.apiVersion} ${doc.kind}`);
    if (!sc) return null;
    const out = [];
    crdErrors(doc, sc, "", out);
    // The API server checks metadata as every object's; these need only a valid name.
    if (!/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(doc.metadata?.name ?? "")) out.push("/metadata/name: not a DNS name");
    return out;
}

// ---- strict field names from the package's typed interfaces ----------------
const ifaceCache = new Map();
function resolveImport(fromFile, spec) {
    const base = spec.startsWith(".") ? path.resolve(path.dirname(fromFile), spec)
        : path.join(nodeModules, spec);
    return base + ".d.ts";
}
// Fields of the first interface in a .d.ts file: name -> type text, plus the
// file each imported interface lives in. null when the file declares a plain
// type (e.g. IntOrString), which has no fields to check.
function fieldsOf(dts) {
    if (ifaceCache.has(dts)) return ifaceCache.get(dts);
    const text = fs.readFileSync(dts, "utf8");
    const imports = new Map();
    for (const m of text.matchAll(/import \{ ([^}]+) \} from "([^"]+)"/g))
        for (const name of m[1].split(",").map(s => s.trim()))
            imports.set(name, resolveImport(dts, m[2]));
    const body = text.match(/export interface \w+(?: extends [\w, ]+)? \{\n([\s\S]*?)\n\}/);
    let res = null;
    if (body) {
        const fields = new Map();
        // One property per line at the interface's indentation; a map type
        // ({ [key: string]: ... }) continues on the next lines and is not descended.
        for (const m of body[1].matchAll(/^ {4}"([^"]+)"\??: (.*?);?$/gm)) fields.set(m[1], m[2]);
        if (/extends TypeMeta/.test(body[0])) { fields.set("apiVersion", "string"); fields.set("kind", "string"); }
        res = { fields, imports };
    }
    ifaceCache.set(dts, res);
    return res;
}
function strictErrors(value, dts, where, out) {
    const info = fieldsOf(dts);
    if (!info || value === null || typeof value !== "object" || Array.isArray(value)) return;
    for (const [key, v] of Object.entries(value)) {
        if (!info.fields.has(key)) { out.push(`${where}/${key}: unknown field`); continue; }
        let type = info.fields.get(key), arr = false;
        const a = type.match(/^Array<(\w+)>$/);
        if (a) { type = a[1]; arr = true; }
        if (!info.imports.has(type)) continue;
        const sub = info.imports.get(type);
        if (arr && Array.isArray(v)) v.forEach((e, i) => strictErrors(e, sub, `${where}/${key}/${i}`, out));
        else if (!arr) strictErrors(v, sub, `${where}/${key}`, out);
    }
}
function strictCheck(doc) {
    const out = [];
    const dts = modulePath(doc.apiVersion, doc.kind).replace(/\.mjs$/, ".d.ts");
    if (fs.existsSync(dts)) strictErrors(doc, dts, "", out);
    return out;
}

// ---- the manifests -----------------------------------------------------------
const dir = path.join(srcDir, "deploy", "kubernetes");
const docs = [];
for (const f of fs.readdirSync(dir).filter(f => f.endsWith(".yaml")).sort()) {
    let loaded;
    try { loaded = yaml.loadAll(fs.readFileSync(path.join(dir, f), "utf8")); }
    catch (e) { check(false, `${f} parses as YAML`, e.message); continue; }
    for (const doc of loaded.filter(Boolean)) {
        docs.push(doc);
        const what = `${f}: ${doc.kind} ${doc.metadata?.name}`;
        const crd = crdCheck(doc);
        if (crd) {
            check(crd.length === 0, `${what} validates against its CRD's ${doc.apiVersion} schema`, crd.join("\n"));
            continue;
        }
        const err = await schemaErrors(doc);
        check(err === null, `${what} validates against ${doc.apiVersion} ${doc.kind}`, err);
        const strict = strictCheck(doc);
        check(strict.length === 0, `${what} has only known field names`, strict.join("\n"));
    }
}
const find = (kind, name) => docs.find(d => d.kind === kind && (!name || d.metadata.name === name));
const deploy = find("Deployment"), hpa = find("HorizontalPodAutoscaler");
const cm = find("ConfigMap", "graphserve-config"), adapter = find("ConfigMap", "prometheus-adapter-graphserve");
if (!check(deploy && hpa && cm && adapter && find("Service"), "Deployment, Service, HPA and both ConfigMaps are there"))
    process.exit(1);

// The checks above can fail.
const bad = structuredClone(deploy);
bad.spec.template.spec.containers[0].ports[0].containerPort = "8080";
check(await schemaErrors(bad) !== null, "schema validation refuses a string containerPort");
const typo = structuredClone(deploy);
typo.spec.template.spec.containers[0].livenesProbe = typo.spec.template.spec.containers[0].livenessProbe;
check(strictCheck(typo).some(e => e.includes("livenesProbe")), "strict check refuses a misspelt livenesProbe");

// ---- graphserve itself ------------------------------------------------------------
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "gs-k8s-"));
const cfg = JSON.parse(cm.data["graphserve.json"]);
const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("GRAPHSERVE_")));
function gs(args) {
    try { return [0, execFileSync(graphserve, args, { env, encoding: "utf8", stdio: "pipe" })]; }
    catch (e) { return [e.status ?? 1, String(e.stdout) + String(e.stderr)]; }
}
const model = path.join(tmp, "model.gguf");
fs.writeFileSync(model, "GGUF");
const cfgFile = path.join(tmp, "graphserve.json");
fs.writeFileSync(cfgFile, JSON.stringify({ ...cfg, model }));
let [rc, out] = gs(["config", "check", cfgFile]);
check(rc === 0, "the ConfigMap's graphserve.json passes graphserve config check", out);

const c0 = deploy.spec.template.spec.containers[0];
const keys = path.join(tmp, "api-keys");
fs.writeFileSync(keys, "test-key-0123456789\n");
const args = c0.args.slice(1).map(a => a === "/etc/graphserve/graphserve.json" ? cfgFile
    : a === "/run/secrets/graphserve/api-keys" ? keys : a);
check(c0.args[0] === "serve", "the container runs `graphserve serve`");
[rc, out] = gs(["config", "print", ...args]);
check(rc === 0, "graphserve accepts the container's options: " + c0.args.slice(1).join(" "), out);
const mounts = new Map(c0.volumeMounts.map(m => [m.mountPath, m.name]));
check(mounts.has(path.dirname(cfg.model)) && mounts.has("/etc/graphserve") && mounts.has("/run/secrets/graphserve"),
      "the model, config and key paths are mounted volumes");
const port = c0.ports.find(p => p.name === "http");
check(port && port.containerPort === cfg.port && cfg.host === "0.0.0.0",
      "the container port is the port graphserve listens on, on every interface");

check(c0.livenessProbe?.httpGet?.path === "/health", "liveness probes /health");
check(c0.readinessProbe?.httpGet?.path === "/ready", "readiness probes /ready");
check(deploy.spec.template.spec.terminationGracePeriodSeconds > cfg.drain_timeout_s,
      "terminationGracePeriodSeconds outlasts drain_timeout_s");
const bytes = s => { const m = String(s).match(/^(\d+)(Ki|Mi|Gi|Ti)?$/); return m ? Number(m[1]) * 1024 ** ["", "Ki", "Mi", "Gi", "Ti"].indexOf(m[2] ?? "") : NaN; };
const kv = bytes(String(cfg.kv_cache_bytes).replace(/iB$/, "i"));
check(bytes(c0.resources.requests.memory) >= kv + 2 ** 30 && c0.resources.limits.memory === c0.resources.requests.memory,
      `memory request ${c0.resources.requests.memory} covers kv_cache_bytes ${cfg.kv_cache_bytes} + 1 GiB, limit = request`);

// ---- the autoscaler's metrics ---------------------------------------------------------
const rules = yaml.load(adapter.data["config.yaml"]).rules;
const exposed = new Set(rules.map(r => r.name.as));
for (const m of hpa.spec.metrics)
    check(m.type === "Pods" && exposed.has(m.pods.metric.name), `HPA metric ${m.pods?.metric?.name} is exposed by an adapter rule`);
const metricsSrc = fs.readFileSync(path.join(srcDir, "server", "metrics.c"), "utf8");
for (const r of rules) {
    const series = [...(r.seriesQuery + " " + r.metricsQuery).matchAll(/graphserve_[a-z_]+/g)].map(m => m[0]);
    for (const s of new Set(series))
        check(metricsSrc.includes(`"${s}"`) || metricsSrc.includes(`"${s}{`), `adapter rule's series ${s} is one graphserve writes`);
    check(/<<\.LabelMatchers>>/.test(r.metricsQuery) && /<<\.GroupBy>>/.test(r.metricsQuery),
          `adapter rule ${r.name.as} groups by the pod`);
}
check(hpa.spec.scaleTargetRef.name === deploy.metadata.name, "the HPA scales the Deployment");

// ---- the inference pool -----------------------------------------------------------------
const pool = find("InferencePool"), route = find("HTTPRoute");
if (check(pool && route, "the InferencePool and its HTTPRoute are there")) {
    const badPool = structuredClone(pool);
    badPool.spec.targetPorts = [{ number: "8080" }];
    badPool.spec.selctor = badPool.spec.selector;
    const e = crdCheck(badPool);
    check(e.some(x => x.includes("targetPorts/0/number")) && e.some(x => x.includes("selctor")),
          "the CRD check refuses a string port and a misspelt field", e.join("\n"));
    const podLabels = deploy.spec.template.metadata.labels;
    check(Object.entries(pool.spec.selector.matchLabels).every(([k, v]) => podLabels[k] === v),
          "the InferencePool selects the Deployment's pods");
    check(pool.spec.targetPorts.map(p => p.number).includes(port.containerPort),
          "the InferencePool targets the container's port");
    check(route.spec.rules.every(r => r.backendRefs.every(b => b.kind === "InferencePool" &&
          b.group === "inference.networking.k8s.io" && b.name === pool.metadata.name)),
          "the HTTPRoute sends to the InferencePool");
    check(cfg.metrics_public === true, "/metrics is open to the picker, which sends no key (metrics_public)");
    const poolText = fs.readFileSync(path.join(dir, "inferencepool.yaml"), "utf8");
    const named = [...poolText.matchAll(/^#.*?(graphserve_[a-z_]+)/gm)].map(m => m[1]);
    check(named.length >= 4, "inferencepool.yaml names the picker's metrics", named.join(", "));
    for (const s of new Set(named))
        check(metricsSrc.includes(`"${s}"`) || metricsSrc.includes(`"${s}{`), `the picker's metric ${s} is one graphserve writes`);
}
fs.rmSync(tmp, { recursive: true });
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
