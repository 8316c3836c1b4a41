// Checks of one kustomize overlay's render: the Kubernetes schema of every object
// (kubernetes-models), then what a schema cannot see across objects. An overlay holds either one
// tensor-parallel group (a coordinator and its worker StatefulSet: overlays/cpu, overlays/gpu) or
// a fleet (whole `shardlm serve` instances behind SGLang's model gateway: overlays/fleet*).

import { spawnSync } from "node:child_process";
import path from "node:path";

import { parseAllDocuments } from "yaml";

import { check } from "./report.mjs";

// Made by the user before `kubectl apply -k` (docs/deploy.md); everything else a workload
// names must be in the render.
const USER_SECRETS = new Set(["shardlm-internal", "shardlm-api-keys", "shardlm-tls", "shardlm-gateway"]);
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

// The values of a flag that takes a list, as argparse reads it ("--name A B C", up to the next
// flag, or "--name=A"), or undefined when it is absent.
function flagList(args, name) {
  const i = args.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return undefined;
  if (args[i] !== `--${name}`) return [args[i].slice(name.length + 3)];
  const values = [];
  for (let j = i + 1; j < args.length && !args[j].startsWith("--"); j++) values.push(args[j]);
  return values;
}

const hasFlag = (args, name) => args.some((a) => a === `--${name}` || a.startsWith(`--${name}=`));

// What a container runs, from its expanded args: a shardlm command (the first argument), SGLang's
// model gateway (known by its worker flags: the image's entrypoint is the launcher), or other.
const SHARDLM_COMMANDS = new Set(["coordinator", "worker", "serve", "export-tokenizer"]);
function roleOf(args) {
  if (SHARDLM_COMMANDS.has(args[0])) return args[0];
  if (hasFlag(args, "worker-urls") || hasFlag(args, "service-discovery")) return "gateway";
  return "other";
}

// Every container of every workload (init containers too) with its expanded args and role.
function runs(objs) {
  return workloads(objs).flatMap((w) =>
    containersOf(w.spec.template.spec).map((c) => {
      const args = expandedArgs(c, objs, []);
      return { w, c, args, role: roleOf(args), where: `${id(w)}/${c.name}` };
    }),
  );
}

// The number of a container's port given by number or by name, or undefined if it declares none.
function containerPortNumber(c, port) {
  if (typeof port === "number") return (c.ports ?? []).some((p) => p.containerPort === port) ? port : undefined;
  return (c.ports ?? []).find((p) => p.name === port)?.containerPort;
}

const isPositiveInteger = (v) => /^[1-9][0-9]*$/.test(String(v));

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

// A group (coordinator + worker StatefulSet): the workers' count, SHARDLM_TP and the
// coordinator's --tp agree. A fleet: each instance's --tp agrees with the SHARDLM_TP it reads.
function checkTp(name, objs) {
  const all = runs(objs);
  const group = all.filter((r) => r.role === "coordinator" || r.role === "worker");
  const instances = all.filter((r) => r.role === "serve");
  if (group.length === 0 && instances.length === 0) {
    check(`${name}: runs shardlm`, "no container runs shardlm coordinator, worker or serve");
    return;
  }
  if (group.length > 0) checkGroupTp(name, objs, group);
  if (instances.length > 0) checkInstanceTp(name, objs, instances);
}

function checkGroupTp(name, objs, group) {
  const seen = [];  // [where, value]
  const problems = [];
  for (const cm of objs.filter((o) => o.kind === "ConfigMap" && o.data?.SHARDLM_TP !== undefined)) {
    seen.push([`ConfigMap ${cm.metadata.name} SHARDLM_TP`, cm.data.SHARDLM_TP]);
  }
  const workerSets = workloads(objs).filter((w) => w.kind === "StatefulSet" && isWorker(w));
  for (const w of workerSets) seen.push([`${id(w)} replicas`, w.spec.replicas ?? 1]);
  for (const { args, where } of group) {
    const tp = flag(args, "tp");
    if (tp !== undefined) seen.push([`${where} --tp`, tp]);
  }
  if (!seen.some(([where]) => where.startsWith("ConfigMap"))) problems.push("no ConfigMap sets SHARDLM_TP");
  if (workerSets.length === 0) problems.push("no worker StatefulSet");
  const values = new Set(seen.map(([, v]) => String(v)));
  if (values.size > 1) problems.push(`disagree: ${seen.map(([w, v]) => `${w} = ${v}`).join(", ")}`);
  for (const v of values) if (!isPositiveInteger(v)) problems.push(`tp "${v}" is not a positive integer`);
  const shown = values.size === 1 ? [...values][0] : "?";
  check(`${name}: worker count = tp = ${shown} (${seen.map(([w]) => w).join("; ")})`, problems);
}

function checkInstanceTp(name, objs, instances) {
  const problems = [];
  const shown = [];
  for (const { c, args, where } of instances) {
    const tp = flag(args, "tp");
    const configured = environment(c, objs).get("SHARDLM_TP");
    if (tp !== undefined && typeof configured === "string" && tp !== configured) {
      problems.push(`${where}: --tp ${tp}, but the SHARDLM_TP of its environment is ${configured}`);
    }
    const value = tp ?? configured ?? "1";  // serve's default
    if (!isPositiveInteger(value)) problems.push(`${where}: tp "${value}" is not a positive integer`);
    shown.push(`${where} ${value}`);
  }
  check(`${name}: each instance's --tp agrees with its SHARDLM_TP (${shown.join("; ")})`, problems);
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

// The gateway's own endpoints (sglang-router 0.3.2): /liveness and /health answer while the
// process does; /readiness only once at least one worker is healthy.
const GATEWAY_PROBE_PATHS = {
  startupProbe: ["/liveness", "/health"],
  readinessProbe: ["/readiness"],
  livenessProbe: ["/liveness", "/health"],
};

function gatewayProbeProblems(c, args, where, problems) {
  const port = Number(flag(args, "port") ?? 30000);
  const scheme = flag(args, "tls-cert-path") === undefined ? "HTTP" : "HTTPS";
  for (const [kind, paths] of Object.entries(GATEWAY_PROBE_PATHS)) {
    const probe = c[kind];
    if (!probe) {
      if (kind !== "startupProbe") problems.push(`${where}: no ${kind}`);
      continue;
    }
    const get = probe.httpGet;
    if (!get) {
      problems.push(`${where}: ${kind} is not an httpGet probe`);
      continue;
    }
    const target = containerPortNumber(c, get.port);
    if (target === undefined) problems.push(`${where}: ${kind} port ${get.port} is not a container port`);
    else if (target !== port) problems.push(`${where}: ${kind} probes port ${target}, but the gateway serves on --port ${port}`);
    if (!paths.includes(get.path)) problems.push(`${where}: ${kind} GETs ${get.path}, want ${paths.join(" or ")}`);
    if ((get.scheme ?? "HTTP") !== scheme) {
      problems.push(`${where}: ${kind} speaks ${get.scheme ?? "HTTP"}, but the gateway serves ${scheme}` +
        (scheme === "HTTPS" ? " (--tls-cert-path)" : ""));
    }
  }
}

function checkProbes(name, objs) {
  const problems = [];
  // The health contract (deploy/k8s/base): "" is readiness, "liveness" is liveness.
  const wantService = { startupProbe: "liveness", readinessProbe: "", livenessProbe: "liveness" };
  for (const w of workloads(objs)) {
    for (const c of w.spec.template.spec.containers ?? []) {
      const where = `${id(w)}/${c.name}`;
      const args = expandedArgs(c, objs, []);
      const role = roleOf(args);
      if (role === "gateway") {
        gatewayProbeProblems(c, args, where, problems);
        continue;
      }
      if (!["coordinator", "worker", "serve"].includes(role)) {
        problems.push(`${where}: runs neither shardlm (coordinator, worker, serve) nor the gateway; no probe rule for it`);
        continue;
      }
      const ports = new Set((c.ports ?? []).map((p) => p.containerPort));
      // The kubelet's gRPC probe speaks plaintext only: it cannot probe the TLS port.
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
  check(`${name}: shardlm's probes are grpc.health.v1 on plaintext container ports; ` +
    "the gateway's are HTTP GETs of its /readiness and /liveness", problems);
}

// Prometheus finds the metrics endpoints by pod annotations (docs/deploy.md): a pod with a metrics
// port (shardlm's --metrics-port, the gateway's --prometheus-port) carries prometheus.io/scrape,
// port and path for it, and declares the port.
function checkMetricsAnnotations(name, objs) {
  const problems = [];
  const seen = [];
  for (const w of workloads(objs)) {
    const annotations = w.spec.template.metadata?.annotations ?? {};
    for (const c of w.spec.template.spec.containers ?? []) {
      const args = expandedArgs(c, objs, []);
      const role = roleOf(args);
      let port;
      if (role === "coordinator" || role === "serve") port = flag(args, "metrics-port");
      else if (role === "gateway") port = flag(args, "prometheus-port") ?? "29000";  // its default
      if (port === undefined || port === "0") continue;
      const where = `${id(w)}/${c.name}`;
      seen.push(`${where} :${port}`);
      if (!(c.ports ?? []).some((p) => String(p.containerPort) === port)) {
        problems.push(`${where}: metrics port ${port} is not a container port`);
      }
      const want = { "prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": "/metrics" };
      for (const [key, value] of Object.entries(want)) {
        if (annotations[key] !== value) {
          problems.push(`${id(w)}: annotation ${key} is ${JSON.stringify(annotations[key])}, want "${value}"`);
        }
      }
    }
  }
  check(`${name}: pods with a metrics port carry the prometheus.io annotations for it (${seen.join("; ") || "none"})`,
    problems);
}

// ---- fleets: `shardlm serve` instances, SGLang's model gateway in front ----

const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);

// What the gateway and GAIE's endpoint picker need of an instance: it listens beyond loopback
// (serve's --host defaults to 127.0.0.1), serves metrics (the picker reads vllm:* there), and
// declares its KV-event ports, with the topic llm-d parses.
function checkInstances(name, objs) {
  const instances = runs(objs).filter((r) => r.role === "serve" && r.w.spec.template.spec.containers.includes(r.c));
  if (instances.length === 0) return;
  const problems = [];
  for (const { c, args, where } of instances) {
    const host = flag(args, "host") ?? "127.0.0.1";
    if (LOOPBACK.has(host)) problems.push(`${where}: --host ${host} (the default): nothing outside the pod reaches it`);
    const metricsHost = flag(args, "metrics-host") ?? host;
    const metrics = flag(args, "metrics-port");
    if (metrics === undefined || metrics === "0") problems.push(`${where}: no fixed --metrics-port (GAIE's endpoint picker reads the vllm:* metrics there)`);
    else if (LOOPBACK.has(metricsHost)) problems.push(`${where}: metrics on ${metricsHost} only`);
    const ports = new Set((c.ports ?? []).map((p) => String(p.containerPort)));
    for (const f of ["kv-events-endpoint", "kv-events-replay-endpoint"]) {
      const endpoint = flag(args, f);
      if (endpoint === undefined) continue;
      const m = endpoint.match(/^tcp:\/\/(.+):([0-9]+)$/);
      if (!m) problems.push(`${where}: --${f} ${endpoint} is not tcp://HOST:PORT`);
      else if (LOOPBACK.has(m[1])) problems.push(`${where}: --${f} ${endpoint} binds loopback only`);
      else if (!ports.has(m[2])) problems.push(`${where}: --${f} port ${m[2]} is not a container port`);
    }
    const topic = flag(args, "kv-events-topic");
    if (topic !== undefined && !topic.startsWith("kv@")) problems.push(`${where}: --kv-events-topic ${topic}: llm-d subscribes to kv@<pod>@<model>`);
  }
  check(`${name}: each instance listens beyond loopback, serves metrics, and declares its KV-event ports`, problems);
}

// sglang-router 0.3.2's --policy choices.
const GATEWAY_POLICIES = new Set(["random", "round_robin", "cache_aware", "power_of_two", "manual"]);

// The serve container of a workload's pod template, or undefined.
function instanceOf(w, objs) {
  for (const c of w.spec.template.spec.containers ?? []) {
    const args = expandedArgs(c, objs, []);
    if (roleOf(args) === "serve") return { c, args };
  }
  return undefined;
}

const matches = (labels, selector) =>
  Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels?.[k] === v);

// Does the render let service account `sa` list and watch pods (in its namespace, or in all of
// them when `clusterWide`)?
function canWatchPods(objs, sa, clusterWide) {
  const grants = (role) => (role?.rules ?? []).some((r) =>
    (r.apiGroups ?? []).some((g) => g === "" || g === "*") &&
    (r.resources ?? []).some((x) => x === "pods" || x === "*") &&
    ["list", "watch"].every((v) => (r.verbs ?? []).includes(v) || (r.verbs ?? []).includes("*")));
  const kinds = clusterWide ? ["ClusterRoleBinding"] : ["RoleBinding", "ClusterRoleBinding"];
  return objs.some((b) => kinds.includes(b.kind) &&
    (b.subjects ?? []).some((s) => s.kind === "ServiceAccount" && s.name === sa) &&
    grants(find(objs, b.roleRef?.kind, b.roleRef?.name)));
}

// The instances a gateway routes to, by its --worker-urls (each the stable name of one
// StatefulSet pod) or by Kubernetes discovery (--service-discovery --selector ...):
// [{ w, inst, port, how }].
function gatewayTargets(r, objs, problems) {
  const { w, args, where } = r;
  const targets = [];
  if (hasFlag(args, "service-discovery")) {
    const selector = {};
    for (const item of (flagList(args, "selector") ?? []).flatMap((s) => s.split(" "))) {
      const at = item.indexOf("=");
      if (at > 0) selector[item.slice(0, at)] = item.slice(at + 1);
    }
    const selected = workloads(objs).filter((x) => matches(x.spec.template.metadata?.labels, selector));
    if (selected.length === 0) problems.push(`${where}: --selector ${JSON.stringify(selector)} selects no pod template`);
    const port = Number(flag(args, "service-discovery-port") ?? 80);
    for (const x of selected) {
      const inst = instanceOf(x, objs);
      if (!inst) problems.push(`${where}: --selector selects ${id(x)}, which runs no shardlm serve`);
      else targets.push({ w: x, inst, port, how: `selector ${JSON.stringify(selector)}` });
    }
    // 0.3.2 picks its router (HTTP or gRPC) once, from the scheme of the URLs it starts with.
    // Discovery starts with none, so without IGW mode only the HTTP router runs.
    if (!hasFlag(args, "enable-igw")) problems.push(`${where}: --service-discovery of gRPC instances needs --enable-igw in 0.3.2`);
    const spec = w.spec.template.spec;
    if (spec.automountServiceAccountToken === false) problems.push(`${where}: discovery needs the service account token, but automountServiceAccountToken is false`);
    const sa = spec.serviceAccountName ?? "default";
    const clusterWide = flag(args, "service-discovery-namespace") === undefined;
    if (!canWatchPods(objs, sa, clusterWide)) {
      problems.push(`${where}: no ${clusterWide ? "ClusterRoleBinding" : "(Cluster)RoleBinding"} lets ServiceAccount ${sa} list and watch pods` +
        (clusterWide ? " (without --service-discovery-namespace it watches every namespace)" : ""));
    }
    return targets;
  }
  const urls = flagList(args, "worker-urls") ?? [];
  if (urls.length === 0) problems.push(`${where}: --worker-urls lists no instance`);
  const bySet = new Map();  // StatefulSet name -> { w, ordinals }
  for (const url of urls) {
    const m = url.match(/^([a-z]+):\/\/([^/:]+):([0-9]+)$/);
    if (!m) {
      problems.push(`${where}: worker URL "${url}" is not SCHEME://HOST:PORT`);
      continue;
    }
    const [, scheme, host, port] = m;
    if (scheme !== "grpc") problems.push(`${where}: "${url}": want grpc:// (0.3.2 picks its gRPC router by the URLs' scheme)`);
    const labels = host.split(".");
    const pm = labels[0].match(/^(.+)-([0-9]+)$/);
    const set = pm ? find(objs, "StatefulSet", pm[1]) : undefined;
    if (!set) {
      problems.push(`${where}: "${url}": ${labels[0]} is not <StatefulSet>-<ordinal> of a StatefulSet in the render`);
      continue;
    }
    if (labels[1] !== set.spec.serviceName || (labels.length > 3 && labels[3] !== "svc")) {
      problems.push(`${where}: "${url}": want the pod's stable name ${labels[0]}.${set.spec.serviceName}[.NAMESPACE[.svc...]]`);
    }
    const entry = bySet.get(set.metadata.name) ?? { w: set, ordinals: [] };
    entry.ordinals.push(Number(pm[2]));
    bySet.set(set.metadata.name, entry);
    const inst = instanceOf(set, objs);
    if (!inst) problems.push(`${where}: "${url}": ${id(set)} runs no shardlm serve`);
    else targets.push({ w: set, inst, port: Number(port), how: url });
  }
  // One URL per pod: every ordinal below replicas, once.
  for (const { w: set, ordinals } of bySet.values()) {
    const replicas = set.spec.replicas ?? 1;
    const want = Array.from({ length: replicas }, (_, i) => i);
    const missing = want.filter((i) => !ordinals.includes(i));
    const extra = ordinals.filter((i) => i >= replicas);
    const twice = ordinals.filter((i, k) => ordinals.indexOf(i) !== k);
    if (missing.length || extra.length || twice.length) {
      problems.push(`${where}: ${id(set)} has ${replicas} replicas but the URLs name ordinals ${ordinals.join(", ")}` +
        (missing.length ? ` (missing ${missing.join(", ")})` : "") +
        (extra.length ? ` (no pod ${extra.join(", ")})` : "") +
        (twice.length ? ` (twice: ${twice.join(", ")})` : ""));
    }
  }
  return targets;
}

// The gateway: its workers resolve to the instances' gRPC port, one per replica; it loads the
// tokenizer from where its pod holds the instances' --router-model-path; its policy exists.
function checkGateway(name, objs) {
  const gateways = runs(objs).filter((r) => r.role === "gateway");
  if (gateways.length === 0) return;
  const routing = [];
  const tokenizer = [];
  const policy = [];
  const routes = [];
  const policies = [];
  for (const r of gateways) {
    const { w, c, args, where } = r;
    const targets = gatewayTargets(r, objs, routing);
    for (const t of targets) {
      const instWhere = `${id(t.w)}/${t.inst.c.name}`;
      const port = Number(flag(t.inst.args, "port") ?? 50051);  // serve's default
      if (t.port !== port) routing.push(`${where}: ${t.how}: port ${t.port}, but ${instWhere} serves on --port ${port}`);
      if (containerPortNumber(t.inst.c, port) === undefined) routing.push(`${instWhere}: --port ${port} is not a container port`);
      if (flag(t.inst.args, "tls-cert") !== undefined) routing.push(`${instWhere}: TLS on --port: the gateway calls its workers in plaintext`);
      if (flag(t.inst.args, "api-key-file") !== undefined) routing.push(`${instWhere}: API keys on --port: the gateway sends none over gRPC (docs/routers.md)`);
    }
    const sets = [...new Set(targets.map((t) => t.w))];
    routes.push(sets.map((s) => `${id(s)} x${s.spec.replicas ?? 1}`).join(", "));

    // The tokenizer: the gateway routes by the model_path instances report and loads the
    // tokenizer from its own --tokenizer-path, so the two are one path, present in its pod.
    const path = flag(args, "tokenizer-path") ?? flag(args, "model-path");
    if (path === undefined) {
      tokenizer.push(`${where}: no --tokenizer-path`);
    } else {
      for (const t of targets) {
        const reported = flag(t.inst.args, "router-model-path") ?? flag(t.inst.args, "model");
        if (reported !== path) {
          tokenizer.push(`${where}: --tokenizer-path ${path}, but ${id(t.w)} reports ${reported} ` +
            "(--router-model-path, default --model): clients' model must be both");
        }
      }
      const mount = (c.volumeMounts ?? []).find((m) =>
        path === m.mountPath || path.startsWith(m.mountPath.replace(/\/$/, "") + "/"));
      if (!mount) {
        tokenizer.push(`${where}: --tokenizer-path ${path} is in none of its volumes`);
      } else {
        const spec = w.spec.template.spec;
        const volume = (spec.volumes ?? []).find((v) => v.name === mount.name);
        const exporters = (spec.initContainers ?? [])
          .map((x) => ({ x, xargs: expandedArgs(x, objs, []) }))
          .filter(({ xargs }) => roleOf(xargs) === "export-tokenizer");
        const fills = exporters.some(({ x, xargs }) => flag(xargs, "out") === path &&
          (x.volumeMounts ?? []).some((m) => m.name === mount.name && m.mountPath === mount.mountPath && !m.readOnly));
        if (exporters.length > 0 && !fills) {
          tokenizer.push(`${where}: no export-tokenizer init container writes --out ${path} into volume ${mount.name} at ${mount.mountPath}`);
        }
        if (exporters.length === 0 && volume?.emptyDir) {
          tokenizer.push(`${where}: --tokenizer-path ${path} is in emptyDir ${mount.name}, which nothing fills`);
        }
      }
    }

    const p = flag(args, "policy") ?? "cache_aware";  // 0.3.2's default
    if (!GATEWAY_POLICIES.has(p)) policy.push(`${where}: --policy "${p}" is not one of ${[...GATEWAY_POLICIES].join(", ")}`);
    policies.push(p);
  }
  // One problem of an instance is found once per URL that names it: report it once.
  check(`${name}: the gateway reaches one instance per replica on its gRPC port (${routes.join("; ")})`, [...new Set(routing)]);
  check(`${name}: the gateway's --tokenizer-path is the instances' --router-model-path, filled in its pod`, [...new Set(tokenizer)]);
  check(`${name}: the gateway's policy is one sglang-router 0.3.2 has (${policies.join("; ")})`, policy);
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
  checkMetricsAnnotations(name, objs);
  checkInstances(name, objs);
  checkGateway(name, objs);
  checkImages(name, objs);
}
