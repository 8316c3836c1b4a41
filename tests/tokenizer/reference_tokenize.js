#!/usr/bin/env node
/*
 * Reference tokenizer for shardlm's tokenizer tests.
 *
 *   node tests/tokenizer/reference_tokenize.js llama3|qwen3 < corpus.jsonl
 *
 * Reads JSON lines {"text": "..."} from stdin and prints one JSON line
 * {"ids": [...]} per input line, in order.  Blank input lines are skipped (the
 * engine's `tokenize` command is expected to do the same).
 *
 * The ids come from @lenml/tokenizers (a dependency-free fork of the
 * tokenizers part of transformers.js), loading tokenizer.json and
 * tokenizer_config.json from the @lenml/tokenizer-<name> package's models/
 * folder, and encoding with add_special_tokens: false, i.e. no BOS/EOS is
 * added, but special-token *text* inside the input (e.g. "<|im_end|>") is still
 * matched as the added token, as in Hugging Face `tokenizers`.
 *
 * Modules are resolved from third_party/npm/node_modules relative to this
 * script, so it works from any working directory.
 */
"use strict";

const path = require("path");
const fs = require("fs");

const NODE_MODULES = path.resolve(__dirname, "..", "..", "third_party", "npm", "node_modules");
const NAMES = ["llama3", "qwen3"];

function usage(msg) {
  if (msg) process.stderr.write(`reference_tokenize: ${msg}\n`);
  process.stderr.write(`usage: node reference_tokenize.js ${NAMES.join("|")} < corpus.jsonl\n`);
  process.exit(2);
}

function loadJSON(file) {
  try {
    return JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (e) {
    process.stderr.write(`reference_tokenize: cannot read ${file}: ${e.message}\n`);
    process.exit(2);
  }
}

function main() {
  const name = process.argv[2];
  if (!NAMES.includes(name)) usage(name ? `unknown tokenizer "${name}"` : "missing tokenizer name");

  let TokenizerLoader;
  try {
    ({ TokenizerLoader } = require(path.join(NODE_MODULES, "@lenml", "tokenizers")));
  } catch (e) {
    process.stderr.write(`reference_tokenize: cannot load @lenml/tokenizers from ${NODE_MODULES}: ${e.message}\n`);
    process.exit(2);
  }
  const modelsDir = path.join(NODE_MODULES, "@lenml", `tokenizer-${name}`, "models");
  const tokenizer = TokenizerLoader.fromPreTrained({
    tokenizerJSON: loadJSON(path.join(modelsDir, "tokenizer.json")),
    tokenizerConfig: loadJSON(path.join(modelsDir, "tokenizer_config.json")),
  });

  const input = fs.readFileSync(0, "utf8");
  const out = [];
  input.split("\n").forEach((rawLine, i) => {
    const line = rawLine.replace(/\r$/, "");
    if (line.trim() === "") return;
    let obj;
    try {
      obj = JSON.parse(line);
    } catch (e) {
      process.stderr.write(`reference_tokenize: line ${i + 1} is not JSON: ${e.message}\n`);
      process.exit(1);
    }
    if (typeof obj.text !== "string") {
      process.stderr.write(`reference_tokenize: line ${i + 1} has no string "text"\n`);
      process.exit(1);
    }
    const ids = tokenizer.encode(obj.text, { add_special_tokens: false });
    out.push(JSON.stringify({ ids: Array.from(ids, Number) }));
  });
  process.stdout.write(out.length ? out.join("\n") + "\n" : "");
}

main();
