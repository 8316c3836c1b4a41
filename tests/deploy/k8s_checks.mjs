// Checks of one kustomize overlay's render: the Kubernetes schema of every object
// (kubernetes-models), then what a schema cannot see across objects.

import { spawnSync } from "node:child_process";
import path from "node:path";

import { parseAllDocuments } from "yaml";

import { check } from "./report.mjs";

// Made by the user before `kubectl apply -k` (docs/deploy.md); everything else a workload
// names must be in the render.
const USER_SECRETS = new Set(["shardlm-internal", "shardlm-api-keys", "shardlm-tls"]);
const USER_CLAIMS = new Set(["shardlm-models"]);
const GPU = "nvidia.com/gpu";

// ---- helpers over rendered objects ----

const WORKLOAD_KINDS = new Set(["Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"]);
const id = (o) => `${o.kind} ${o.metadata?.name}`;
const workloads = (objs) => objs.filter((o) => WORKLOAD_KINDS.has(o.kind) && o.spec?.template?.spec);
const containersOf = (podSpec) => [...(podSpec.initContainers ?? []), ...(podSpec.containers ?? [])];
const find = (objs, kind, name) => objs.find((o) => o.kind === kind && o.metadata?.name === name);
const isWorker = (w) => w.spec.template.metadata?.labels?.["app.kubernetes.io/component"] === "worker";

// A container's environment as Kubernetes builds it for $(VAR) expansion in args:
// name -> literal value, or null when the value is only known at run time.
function environment(c, objs) {
  const env = new Map();
  for (const src of c.envFrom ?? []) {
    const prefix = src.prefix ?? "";
    if (src.configMapRef) {
      const cm = find(objs, "ConfigMap", src.configMapRef.name);
      for (const [k, v] of Object.entries(cm?.data ?? {})) env.set(prefix + k, v);
    }
    // Keys of a user-made Secret are unknown here; nothing is added for them.
  }
  for (const e of c.env ?? []) env.set(e.name, e.valueFrom ? null : (e.value ?? ""));
  return env;
}

// args/command with $(VAR) expanded; unresolved names are reported, as Kubernetes would
// leave them in the argument verbatim.
function expandedArgs(c, objs, problems) {
  const env = environment(c, objs);
  return [...(c.command ?? []), ...(c.args ?? [])].map((arg) =>
    String(arg).replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name) => {
      if (m === "$$") return "$";
      if (!env.has(name)) {
        problems.push(`${c.name}: "${arg}" uses $(${name}), which its environment does not define`);
        return m;
      }
      return env.get(name) ?? `<${name}>`;
    }),
  );
}

// The value of flag --name in expanded args ("--name=V" or "--name V"), or undefined.
function flag(args, name) {
  for (let i = 0; i < args.length; i++) {
    if (args[i].startsWith(`--${name}=`)) return args[i].slice(name.length + 3);
    if (args[i] === `--${name}` && i + 1 < args.length) return args[i + 1];
  }
  return undefined;
}

function quantity(q) {
  if (q === undefined || q === null) return 0;
  return Number(q);
}

// ---- kubernetes-models schema validation ----

const modelModules = new Map();
async function modelFor(apiVersion, kind) {
  if (!modelModules.has(apiVersion)) {
    modelModules.set(apiVersion, import(`kubernetes-models/${apiVersion}`).catch(() => null));
  }
  const mod = await modelModules.get(apiVersion);
  const Model = mod?.[kind];
  if (typeof Model !== "function" || Model.kind !== kind || Model.apiVersion !== apiVersion) return null;
  return Model;
}

async function validateSchema(o) {
  if (!o.apiVersion || !o.kind) return ["object without apiVersion or kind"];
  const Model = await modelFor(o.apiVersion, o.kind);
  if (!Model) return [`no schema for ${o.apiVersion} ${o.kind} in kubernetes-models; cannot validate it`];
  try {
    new Model(o).validate();
    return [];
  } catch (e) {
    return (e.errors ?? [{ instancePath: "", message: e.message }]).map(
      (err) => `${err.instancePath || "/"} ${err.message}`,
    );
  }
}

// ---- the checks ----

function checkTp(name, objs) {
  const seen = [];  // [where, value]
  const problems = [];
  for (const cm of objs.filter((o) => o.kind === "ConfigMap" && o.data?.SHARDLM_TP !== undefined)) {
    seen.push([`ConfigMap ${cm.metadata.name} SHARDLM_TP`, cm.data.SHARDLM_TP]);
  }
  for (const w of workloads(objs)) {
    if (w.kind === "StatefulSet" && isWorker(w)) seen.push([`${id(w)} replicas`, w.spec.replicas ?? 1]);
    for (const c of containersOf(w.spec.template.spec)) {
      const tp = flag(expandedArgs(c, objs, []), "tp");
      if (tp !== undefined) seen.push([`${id(w)}/${c.name} --tp`, tp]);
    }
  }
  if (!seen.some(([where]) => where.startsWith("ConfigMap"))) problems.push("no ConfigMap sets SHARDLM_TP");
  if (!seen.some(([where]) => where.startsWith("StatefulSet"))) problems.push("no worker StatefulSet");
  const values = new Set(seen.map(([, v]) => String(v)));
  if (values.size > 1) problems.push(`disagree: ${seen.map(([w, v]) => `${w} = ${v}`).join(", ")}`);
  for (const v of values) if (!/^[1-9][0-9]*$/.test(v)) problems.push(`tp "${v}" is not a positive integer`);
  const shown = values.size === 1 ? [...values][0] : "?";
  check(`${name}: worker count = tp = ${shown} (${seen.map(([w]) => w).join("; ")})`, problems);
}

function checkArgsExpand(name, objs) {
  const problems = [];
  for (const w of workloads(objs)) {
    for (const c of containersOf(w.spec.template.spec)) expandedArgs(c, objs, problems);
  }
  check(`${name}: every $(VAR) in args is defined in its container's environment`, problems);
}

function checkVolumeMounts(name, objs) {
  const problems = [];
  for (const w of workloads(objs)) {
    const spec = w.spec.template.spec;
    const volumes = new Set((spec.volumes ?? []).map((v) => v.name));
    const claims = new Set((w.spec.volumeClaimTemplates ?? []).map((t) => t.metadata?.name));
    for (const c of containersOf(spec)) {
      for (const m of c.volumeMounts ?? []) {
        if (!volumes.has(m.name) && !claims.has(m.name)) {
          problems.push(`${id(w)}/${c.name} mounts "${m.name}", which is not a volume of the pod`);
        }
      }
    }
  }
  check(`${name}: every volumeMount names a volume of its pod`, problems);
}

function checkReferences(name, objs) {
  const problems = [];
  const need = (w, kind, ref, key) => {
    if (!ref) return;
    const obj = find(objs, kind, ref);
    if (kind === "Secret" && !obj && USER_SECRETS.has(ref)) return;
    if (kind === "PersistentVolumeClaim" && !obj && USER_CLAIMS.has(ref)) return;
    if (!obj) problems.push(`${id(w)} uses ${kind} "${ref}": not in the render nor a documented user-made one`);
    else if (key && obj.data?.[key] === undefined && obj.stringData?.[key] === undefined) {
      problems.push(`${id(w)} uses key "${key}" of ${kind} "${ref}", which has no such key`);
    }
  };
  for (const w of workloads(objs)) {
    const spec = w.spec.template.spec;
    for (const c of containersOf(spec)) {
      for (const src of c.envFrom ?? []) {
        if (src.configMapRef && !src.configMapRef.optional) need(w, "ConfigMap", src.configMapRef.name);
        if (src.secretRef && !src.secretRef.optional) need(w, "Secret", src.secretRef.name);
      }
      for (const e of c.env ?? []) {
        const cmk = e.valueFrom?.configMapKeyRef;
        const sk = e.valueFrom?.secretKeyRef;
        if (cmk && !cmk.optional) need(w, "ConfigMap", cmk.name, cmk.key);
        if (sk && !sk.optional) need(w, "Secret", sk.name);
      }
    }
    for (const v of spec.volumes ?? []) {
      if (v.configMap && !v.configMap.optional) need(w, "ConfigMap", v.configMap.name);
      if (v.secret && !v.secret.optional) need(w, "Secret", v.secret.secretName);
      if (v.persistentVolumeClaim) need(w, "PersistentVolumeClaim", v.persistentVolumeClaim.claimName);
      for (const s of v.projected?.sources ?? []) {
        if (s.configMap && !s.configMap.optional) need(w, "ConfigMap", s.configMap.name);
        if (s.secret && !s.secret.optional) need(w, "Secret", s.secret.name);
      }
    }
  }
  check(
    `${name}: every ConfigMap, Secret and claim a workload names exists ` +
      `(or is one of ${[...USER_SECRETS, ...USER_CLAIMS].join(", ")})`,
    problems,
  );
}

function checkServices(name, objs) {
  const problems = [];
  const services = objs.filter((o) => o.kind === "Service");
  for (const s of services) {
    const sel = s.spec?.selector ?? {};
    const pods = workloads(objs).filter((w) => {
      const labels = w.spec.template.metadata?.labels ?? {};
      return Object.keys(sel).length > 0 && Object.entries(sel).every(([k, v]) => labels[k] === v);
    });
    if (pods.length === 0) {
      problems.push(`Service ${s.metadata.name} selects no pod template`);
      continue;
    }
    const portNames = new Set();
    const portNumbers = new Set();
    for (const w of pods) {
      for (const c of containersOf(w.spec.template.spec)) {
        for (const p of c.ports ?? []) {
          if (p.name) portNames.add(p.name);
          portNumbers.add(p.containerPort);
        }
      }
    }
    for (const p of s.spec.ports ?? []) {
      const target = p.targetPort ?? p.port;
      if (typeof target === "string" ? !portNames.has(target) : !portNumbers.has(target)) {
        problems.push(`Service ${s.metadata.name} port ${p.name ?? p.port} targets ${target}, not a container port`);
      }
    }
  }
  for (const w of workloads(objs).filter((o) => o.kind === "StatefulSet")) {
    const gov = find(objs, "Service", w.spec.serviceName);
    if (!gov) problems.push(`${id(w)}: serviceName "${w.spec.serviceName}" is not a Service in the render`);
    else if (gov.spec.clusterIP !== "None") problems.push(`${id(w)}: its Service ${gov.metadata.name} is not headless`);
  }
  // The workers must reach the coordinator's worker endpoint through a rendered Service.
  for (const w of workloads(objs)) {
    for (const c of containersOf(w.spec.template.spec)) {
      const addr = flag(expandedArgs(c, objs, []), "coordinator");
      if (addr === undefined) continue;
      const [host, port] = addr.split(":");
      const svc = find(objs, "Service", host.split(".")[0]);
      if (!svc) problems.push(`${id(w)}/${c.name} --coordinator=${addr}: no Service "${host}"`);
      else if (!(svc.spec.ports ?? []).some((p) => String(p.port) === port)) {
        problems.push(`${id(w)}/${c.name} --coordinator=${addr}: Service ${host} has no port ${port}`);
      }
    }
  }
  check(`${name}: Services select pods and target their ports; workers reach the coordinator`, problems);
}

function checkGpus(name, objs) {
  const gpuOverlay = name.includes("gpu");
  const problems = [];
  let workers = 0;
  for (const w of workloads(objs)) {
    const spec = w.spec.template.spec;
    for (const c of containersOf(spec)) {
      const limit = quantity(c.resources?.limits?.[GPU]);
      const request = c.resources?.requests?.[GPU];
      const where = `${id(w)}/${c.name}`;
      if (request !== undefined && quantity(request) !== limit) {
        problems.push(`${where}: ${GPU} request ${request} differs from its limit ${limit}`);
      }
      if (gpuOverlay && isWorker(w) && spec.containers.includes(c)) {
        workers++;
        if (limit !== 1) problems.push(`${where}: asks for ${limit} ${GPU}, want exactly 1 per worker`);
      } else if (limit !== 0) {
        problems.push(`${where}: asks for ${limit} ${GPU}` + (gpuOverlay ? " (only workers should)" : " in a CPU overlay"));
      }
    }
    if (gpuOverlay && isWorker(w) && !(spec.tolerations ?? []).some((t) => t.key === GPU)) {
      problems.push(`${id(w)}: no toleration for ${GPU}`);
    }
  }
  if (gpuOverlay && workers === 0) problems.push("no worker containers found");
  check(
    gpuOverlay ? `${name}: each worker pod asks for 1 ${GPU} and tolerates it; nothing else asks` : `${name}: no container asks for ${GPU}`,
    problems,
  );
}

function checkNonRoot(name, objs) {
  const problems = [];
  for (const w of workloads(objs)) {
    const pod = w.spec.template.spec.securityContext ?? {};
    for (const c of containersOf(w.spec.template.spec)) {
      const sc = c.securityContext ?? {};
      const where = `${id(w)}/${c.name}`;
      const nonRoot = sc.runAsNonRoot ?? pod.runAsNonRoot;
      const uid = sc.runAsUser ?? pod.runAsUser;
      if (nonRoot !== true) problems.push(`${where}: runAsNonRoot is not true`);
      if (uid === undefined || uid === 0) problems.push(`${where}: runAsUser is ${uid ?? "unset"}, want a non-zero uid`);
      if (sc.allowPrivilegeEscalation !== false) problems.push(`${where}: allowPrivilegeEscalation is not false`);
      if (!(sc.capabilities?.drop ?? []).includes("ALL")) problems.push(`${where}: capabilities do not drop ALL`);
      if (sc.privileged) problems.push(`${where}: privileged`);
    }
  }
  check(`${name}: every container runs as a non-root uid, no privilege escalation, no capabilities`, problems);
}

function checkProbes(name, objs) {
  const problems = [];
  // The health contract (deploy/k8s/base): "" is readiness, "liveness" is liveness.
  const wantService = { startupProbe: "liveness", readinessProbe: "", livenessProbe: "liveness" };
  for (const w of workloads(objs)) {
    for (const c of w.spec.template.spec.containers ?? []) {
      const where = `${id(w)}/${c.name}`;
      const ports = new Set((c.ports ?? []).map((p) => p.containerPort));
      // The kubelet's gRPC probe speaks plaintext only: it cannot probe the TLS port.
      const args = expandedArgs(c, objs, []);
      const tlsPort = flag(args, "tls-cert") === undefined ? undefined : Number(flag(args, "port") ?? 50051);
      for (const [kind, service] of Object.entries(wantService)) {
        const probe = c[kind];
        if (!probe) {
          problems.push(`${where}: no ${kind}`);
          continue;
        }
        if (!probe.grpc) {
          problems.push(`${where}: ${kind} is not a grpc probe`);
          continue;
        }
        if (!ports.has(probe.grpc.port)) problems.push(`${where}: ${kind} port ${probe.grpc.port} is not a container port`);
        if (probe.grpc.port === tlsPort) {
          problems.push(`${where}: ${kind} probes port ${tlsPort}, which serves TLS (--tls-cert); kubelet gRPC probes are plaintext`);
        }
        if ((probe.grpc.service ?? "") !== service) {
          problems.push(`${where}: ${kind} asks service "${probe.grpc.service ?? ""}", want "${service}"`);
        }
      }
    }
  }
  check(`${name}: startup/readiness/liveness probes are grpc.health.v1 on plaintext container ports`, problems);
}

function checkImages(name, objs) {
  const problems = [];
  for (const w of workloads(objs)) {
    for (const c of containersOf(w.spec.template.spec)) {
      const image = c.image ?? "";
      const last = image.split("/").pop();
      if (!last.includes(":") && !image.includes("@")) problems.push(`${id(w)}/${c.name}: image "${image}" has no tag`);
      else if (last.endsWith(":latest")) problems.push(`${id(w)}/${c.name}: image "${image}" is :latest`);
    }
  }
  check(`${name}: every image is set by the overlay to a tag or digest`, problems);
}

// Renders overlay `dir` with `kubectl kustomize` and runs every check on the result.
export async function checkOverlay(dir, kubectl) {
  const name = `overlays/${path.basename(dir)}`;
  const r = spawnSync(kubectl, ["kustomize", dir], { encoding: "utf8", maxBuffer: 64 << 20 });
  if (r.error || r.status !== 0) {
    check(`${name}: kubectl kustomize renders`, `${kubectl}: ${r.error?.message ?? r.stderr.trim()}`);
    return;
  }
  const docs = parseAllDocuments(r.stdout);
  const parseErrors = docs.flatMap((d) => d.errors.map((e) => e.message));
  const objs = docs.map((d) => d.toJS()).filter((o) => o !== null && o !== undefined);
  check(`${name}: kubectl kustomize renders (${objs.map(id).join(", ")})`,
    [...parseErrors, objs.length === 0 ? "the render is empty" : null]);
  if (parseErrors.length > 0 || objs.length === 0) return;

  const schemaProblems = [];
  for (const o of objs) for (const p of await validateSchema(o)) schemaProblems.push(`${id(o)}: ${p}`);
  check(`${name}: every object is valid against its Kubernetes schema`, schemaProblems);

  checkTp(name, objs);
  checkArgsExpand(name, objs);
  checkVolumeMounts(name, objs);
  checkReferences(name, objs);
  checkServices(name, objs);
  checkGpus(name, objs);
  checkNonRoot(name, objs);
  checkProbes(name, objs);
  checkImages(name, objs);
}
