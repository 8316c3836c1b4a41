// Static checks of deploy/docker/Dockerfile.* and of the runtime package list that
// deploy/docker/runtime-packages.sh derives from a built binary.

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

import { check } from "./report.mjs";

// Packages that must not reach an image's final stage.
const BUILD_ONLY = /-dev$|^build-essential|^cmake|^g\+\+|^gcc|^ninja/;

// Instructions of a Dockerfile: comments dropped, continuation lines joined.
function instructions(text) {
  const out = [];
  let current = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (current === "" && (line === "" || line.startsWith("#"))) continue;
    if (current !== "" && line.startsWith("#")) continue;  // a comment inside a continuation
    if (line.endsWith("\\")) {
      current += line.slice(0, -1) + " ";
      continue;
    }
    current += line;
    const m = current.match(/^(\w+)\s*(.*)$/s);
    if (m) out.push({ op: m[1].toUpperCase(), rest: m[2].trim() });
    current = "";
  }
  return out;
}

// Package names given literally to apt-get/apt install in a shell command.
function aptPackages(command) {
  const pkgs = [];
  for (const part of command.split(/&&|\|\||;|\|/)) {
    const words = part.trim().split(/\s+/);
    const at = words.findIndex((w, i) => w === "install" && words.slice(0, i).some((x) => /(^|\/)apt(-get)?$/.test(x)));
    if (at < 0) continue;
    for (const w of words.slice(at + 1)) {
      if (w.startsWith("-") || w.includes("$") || w.includes("`") || w === "") continue;
      pkgs.push(w.replace(/[:=].*$/, ""));
    }
  }
  return pkgs;
}

// Multi-stage, a numeric non-root USER last, no build packages installed in the last stage.
export function checkDockerfile(file, root) {
  const name = path.relative(root, file);
  const ins = instructions(fs.readFileSync(file, "utf8"));
  const froms = ins.map((x, i) => (x.op === "FROM" ? i : -1)).filter((i) => i >= 0);
  check(`${name}: multi-stage (${froms.length} FROM)`, froms.length >= 2 ? [] : ["fewer than two FROM stages"]);
  if (froms.length === 0) return;
  const last = ins.slice(froms[froms.length - 1] + 1);
  const users = last.filter((x) => x.op === "USER");
  const user = users.length ? users[users.length - 1].rest : undefined;
  const uid = user?.split(":")[0];
  check(`${name}: the final stage runs as USER ${user ?? "(none)"}`,
    uid === undefined ? ["no USER in the final stage"]
      : !/^[0-9]+$/.test(uid) ? [`USER ${user}: want a numeric uid (Kubernetes' runAsNonRoot can check only those)`]
        : Number(uid) === 0 ? ["USER is root"] : []);
  const bad = last.filter((x) => x.op === "RUN").flatMap((x) => aptPackages(x.rest)).filter((p) => BUILD_ONLY.test(p));
  check(`${name}: the final stage installs no build tools or -dev packages`,
    bad.map((p) => `installs ${p}`));
}

export function checkRuntimePackages(bin, root, excludes = []) {
  const script = path.join(root, "deploy/docker/runtime-packages.sh");
  const r = spawnSync("bash", [script, ...excludes.flatMap((d) => ["--exclude", d]), bin], { encoding: "utf8" });
  if (r.status !== 0) {
    check(`runtime-packages.sh ${bin}: lists the binary's runtime packages`, r.stderr.trim() || `exit ${r.status}`);
    return;
  }
  const pkgs = r.stdout.split("\n").filter(Boolean);
  check(`runtime-packages.sh ${path.basename(bin)}: ${pkgs.length} runtime packages, none a build tool or -dev`,
    [pkgs.length === 0 ? "empty list" : null, ...pkgs.filter((p) => BUILD_ONLY.test(p)).map((p) => `lists ${p}`)]);
}
