// Drives shardlm's OpenAI-compatible HTTP API with the official `openai` npm package
// (a client nobody here wrote), and prints what it got as one JSON object.
//
//   node tests/integration/openai_client.mjs BASE_URL API_KEY MODEL PROMPT NPM_DIR
//
// Greedy (temperature 0) everywhere, so the caller can compare with other clients.
import { createRequire } from "node:module";
import path from "node:path";

const [baseURL, apiKey, model, prompt, npmDir] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, "noop.js"));
const OpenAI = require("openai");

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);

const c = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
out.completion = { text: c.choices[0].text, finish_reason: c.choices[0].finish_reason, usage: c.usage, object: c.object };

const cs = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, stream: true });
out.completion_stream = { pieces: [], finish_reason: null };
for await (const chunk of cs) {
  for (const ch of chunk.choices) {
    if (ch.text) out.completion_stream.pieces.push(ch.text);
    else if (!ch.finish_reason) out.completion_stream.pieces.push(""); // an empty delta: a defect
    if (ch.finish_reason) out.completion_stream.finish_reason = ch.finish_reason;
  }
}

const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: prompt },
];
const chat = await client.chat.completions.create({ model, messages, max_completion_tokens: 10, temperature: 0 });
out.chat = {
  content: chat.choices[0].message.content,
  role: chat.choices[0].message.role,
  finish_reason: chat.choices[0].finish_reason,
  usage: chat.usage,
  object: chat.object,
};

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
  logprobs: true, top_logprobs: 2,
});
out.chat_stream = { pieces: [], roles: [], finish_reason: null, usage: null, logprob_tokens: 0, top_sizes: [] };
for await (const chunk of stream) {
  if (chunk.usage) out.chat_stream.usage = chunk.usage;
  for (const ch of chunk.choices) {
    if (ch.delta.role) out.chat_stream.roles.push(ch.delta.role);
    if ("content" in ch.delta) out.chat_stream.pieces.push(ch.delta.content);
    if (ch.finish_reason) out.chat_stream.finish_reason = ch.finish_reason;
    for (const lp of ch.logprobs?.content ?? []) {
      out.chat_stream.logprob_tokens += 1;
      out.chat_stream.top_sizes.push(lp.top_logprobs.length);
    }
  }
}

try {
  await client.chat.completions.create({ model, messages, temperature: 5 });
  out.bad_temperature = { status: 0 };
} catch (e) {
  out.bad_temperature = { status: e.status, param: e.param ?? e.error?.param, type: e.type ?? e.error?.type, message: e.message };
}
try {
  await client.completions.create({ model: "no-such-model", prompt });
  out.bad_model = { status: 0 };
} catch (e) {
  out.bad_model = { status: e.status, param: e.param ?? e.error?.param };
}

console.log(JSON.stringify(out));
