#!/usr/bin/env node
// Validates what deploy/ ships, without a cluster or a Docker engine:
//
//   node tests/deploy/validate_manifests.mjs REPO_ROOT [--binary build/shardlm [--exclude DIR]...]
//
// For every overlay under deploy/k8s/overlays it runs `kubectl kustomize` ($KUBECTL, else
// kubectl on PATH), validates each object against the Kubernetes OpenAPI schema of its
// apiVersion/kind (kubernetes-models; an object it has no schema for is a failure), then
// checks what a schema cannot see: that the tensor-parallel degree agrees everywhere, that
// every reference resolves, GPUs, non-root, and gRPC probes on declared ports. It also
// reads deploy/docker/Dockerfile.* (multi-stage, non-root, no build tools at run time) and,
// with --binary, checks the runtime package list deploy/docker/runtime-packages.sh derives
// from the binary (libraries under each --exclude DIR are the image's own copies, as
// Dockerfile.cuda copies PyTorch's and CUDA's). One line per check; exit status 1 if any failed, 2 on bad usage.
//
// Dependencies: `npm ci` in tests/deploy (scripts/setup.sh does it).

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

import { check, failureCount } from "./report.mjs";
import { checkDockerfile, checkRuntimePackages } from "./docker_checks.mjs";

let checkOverlay;
try {
  ({ checkOverlay } = await import("./k8s_checks.mjs"));
  await import("kubernetes-models/v1");
} catch (e) {
  console.error(`validate_manifests: ${e.message}\n  run \`npm ci\` in tests/deploy (scripts/setup.sh does)`);
  process.exit(2);
}

// ---- command line ----------------------------------------------------------------------

const argv = process.argv.slice(2);
let root = null;
let binary = null;
const excludes = [];
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--binary" && i + 1 < argv.length) binary = argv[++i];
  else if (argv[i] === "--exclude" && i + 1 < argv.length) excludes.push(argv[++i]);
  else if (argv[i].startsWith("--binary=")) binary = argv[i].slice("--binary=".length);
  else if (!argv[i].startsWith("-") && root === null) root = argv[i];
  else {
    console.error("usage: validate_manifests.mjs REPO_ROOT [--binary PATH [--exclude DIR]...]");
    process.exit(2);
  }
}
root = path.resolve(root ?? ".");
const kubectl = process.env.KUBECTL || "kubectl";

// ---- main ------------------------------------------------------------------------------

const dockerDir = path.join(root, "deploy/docker");
const dockerfiles = fs.existsSync(dockerDir)
  ? fs.readdirSync(dockerDir).filter((f) => f.startsWith("Dockerfile.")).sort().map((f) => path.join(dockerDir, f))
  : [];
check(`deploy/docker: Dockerfiles found (${dockerfiles.map((f) => path.basename(f)).join(", ")})`,
  dockerfiles.length ? [] : ["no deploy/docker/Dockerfile.*"]);
for (const f of dockerfiles) checkDockerfile(f, root);
if (binary) checkRuntimePackages(path.resolve(binary), root, excludes);

const overlaysDir = path.join(root, "deploy/k8s/overlays");
const overlays = fs.existsSync(overlaysDir)
  ? fs.readdirSync(overlaysDir).sort().map((d) => path.join(overlaysDir, d))
    .filter((d) => ["kustomization.yaml", "kustomization.yml", "Kustomization"].some((k) => fs.existsSync(path.join(d, k))))
  : [];
const kv = spawnSync(kubectl, ["version", "--client"], { encoding: "utf8" });
const kvText = kv.stdout ?? "";
const kubectlVersion = [
  kvText.match(/GitVersion:"([^"]+)"/)?.[1] ?? kvText.match(/Client Version: (\S+)/)?.[1],
  kvText.match(/Kustomize Version: (\S+)/)?.[1],
].filter(Boolean).join(", kustomize ");
check(`deploy/k8s: overlays found (${overlays.map((d) => path.basename(d)).join(", ")}); ` +
  `${kubectl} ${kubectlVersion || kv.error?.message || "?"}`,
  [overlays.length ? null : "no overlay under deploy/k8s/overlays", kv.status === 0 ? null : `${kubectl} does not run`]);
for (const d of overlays) await checkOverlay(d, kubectl);

const failures = failureCount();
console.log(failures === 0 ? "all checks passed" : `${failures} check(s) failed`);
process.exit(failures === 0 ? 0 : 1);
