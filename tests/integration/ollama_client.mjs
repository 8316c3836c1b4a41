// Drives shardlm's Ollama API with the official `ollama` npm package (a client nobody here
// wrote) and prints what it got as one JSON object.
//
//   node tests/integration/ollama_client.mjs HOST API_KEY MODEL NPM_DIR
import { createRequire } from "node:module";
import path from "node:path";

const [host, apiKey, model, npmDir] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, "noop.js"));
const { Ollama } = require("ollama");

const client = new Ollama({ host, headers: { Authorization: `Bearer ${apiKey}` } });
const out = {};
out.list = (await client.list()).models.map((m) => m.model);
out.family = (await client.show({ model })).details.family;
out.ps = (await client.ps()).models.map((m) => m.model);
out.version = (await client.version()).version;
const messages = [{ role: "user", content: "Say hello." }];
const options = { temperature: 0, num_predict: 8 };
out.chat = (await client.chat({ model, messages, options })).message.content;
out.streamed = "";
for await (const part of await client.chat({ model, messages, options, stream: true })) {
  out.streamed += part.message.content;
}
const g = await client.generate({ model, prompt: "Say hello.", options });
out.generate = { done: g.done, eval_count: g.eval_count, response: g.response };
try {
  await client.chat({ model: "no-such-model", messages });
  out.missing = { status_code: 200 };
} catch (e) {
  out.missing = { status_code: e.status_code, error: e.error };
}
console.log(JSON.stringify(out));
