// Drives shardlm's Assistants API objects with the official `openai` npm package (a client
// nobody here wrote) and prints what it got as one JSON object.
//
//   node tests/integration/stateful_client.mjs BASE_URL API_KEY MODEL NPM_DIR
import { createRequire } from "node:module";
import path from "node:path";

const [baseURL, apiKey, model, npmDir] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, "noop.js"));
const OpenAI = require("openai");

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });
const out = {};

const a = await client.beta.assistants.create({ model, name: "npm", metadata: { by: "npm" } });
out.assistant = { id: a.id, object: a.object, name: a.name, metadata: a.metadata, tools: a.tools };
out.retrieved = (await client.beta.assistants.retrieve(a.id)).name;
out.updated = (await client.beta.assistants.update(a.id, { description: "from npm" })).description;
const made = [];
for (let i = 0; i < 5; i++) made.push((await client.beta.assistants.create({ model, name: `p${i}` })).id);
// Auto-pagination, two at a time, newest first: the client follows `after` = the last id.
out.paged = [];
for await (const x of client.beta.assistants.list({ limit: 2 })) {
  if (made.includes(x.id) || x.id === a.id) out.paged.push(x.id);
}
out.made = [...made].reverse().concat([a.id]);

const t = await client.beta.threads.create({ messages: [{ role: "user", content: "first" }] });
await client.beta.threads.messages.create(t.id, { role: "user", content: "second" });
const msgs = [];
for await (const m of client.beta.threads.messages.list(t.id, { order: "asc", limit: 1 })) {
  msgs.push(m.content[0].text.value);
}
out.messages = msgs;
out.thread_deleted = (await client.beta.threads.delete(t.id)).deleted;
try {
  await client.beta.threads.retrieve(t.id);
  out.after_delete = "found";
} catch (e) {
  out.after_delete = { status: e.status, name: e.constructor.name };
}
try {
  await client.beta.assistants.create({ model, tools: [{ type: "file_search" }] });
  out.refused = "accepted";
} catch (e) {
  out.refused = { status: e.status, param: e.param, message: e.message };
}
out.deleted = (await client.beta.assistants.delete(a.id)).deleted;

// The Responses API: a create, a chain, a retrieve, and a stream's events.
const r1 = await client.responses.create({ model, input: "The harbour committee met", temperature: 0, max_output_tokens: 6 });
const r2 = await client.responses.create({
  model, input: "and then?", previous_response_id: r1.id, temperature: 0, max_output_tokens: 6,
});
out.response = { id: r1.id, text: r1.output_text, status: r1.status, usage: r1.usage };
out.chained = { text: r2.output_text, previous: r2.previous_response_id };
out.retrieved_text = (await client.responses.retrieve(r1.id)).output_text;
const stream = client.responses.stream({ model, input: "The harbour committee met", temperature: 0, max_output_tokens: 6 });
out.stream_types = [];
for await (const event of stream) out.stream_types.push(event.type);
out.stream_text = (await stream.finalResponse()).output_text;
console.log(JSON.stringify(out));
