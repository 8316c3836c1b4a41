// Drives every endpoint of shardlm's Assistants, Responses and Conversations APIs with the
// official `openai` npm package (a client nobody here wrote) and prints what it got as one
// JSON object.
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
out.input_items = (await client.responses.inputItems.list(r2.id)).data.map((i) => i.type);
await client.responses.delete(r2.id);
try {
  await client.responses.retrieve(r2.id);
  out.response_deleted = false;
} catch (e) {
  out.response_deleted = e.status === 404;
}
const bg = await client.responses.create({ model, input: "Go on and on", max_output_tokens: 3000, background: true });
out.background = { status: bg.status, cancelled: (await client.responses.cancel(bg.id)).status };

// Messages one by one, and the thread itself.
const t2 = await client.beta.threads.create({ messages: [{ role: "user", content: "one" }], metadata: { k: "v" } });
const m2 = (await client.beta.threads.messages.list(t2.id)).data[0];
out.message = {
  retrieved: (await client.beta.threads.messages.retrieve(m2.id, { thread_id: t2.id })).content[0].text.value,
  updated: (await client.beta.threads.messages.update(m2.id, { thread_id: t2.id, metadata: { m: "1" } })).metadata,
};
out.thread_updated = (await client.beta.threads.update(t2.id, { metadata: { k: "w" } })).metadata;
const extra = await client.beta.threads.messages.create(t2.id, { role: "user", content: "two" });
out.message_deleted = (await client.beta.threads.messages.delete(extra.id, { thread_id: t2.id })).deleted;

// Runs: poll, list, retrieve, update, steps; streamed; create-and-run; cancel.
const ra = await client.beta.assistants.create({ model, temperature: 0 });
const run = await client.beta.threads.runs.createAndPoll(t2.id, { assistant_id: ra.id, max_completion_tokens: 4 });
const steps = await client.beta.threads.runs.steps.list(run.id, { thread_id: t2.id });
out.run = {
  status: run.status,
  listed: (await client.beta.threads.runs.list(t2.id)).data.map((r) => r.id).includes(run.id),
  retrieved: (await client.beta.threads.runs.retrieve(run.id, { thread_id: t2.id })).status,
  updated: (await client.beta.threads.runs.update(run.id, { thread_id: t2.id, metadata: { r: "1" } })).metadata,
  step: (await client.beta.threads.runs.steps.retrieve(steps.data[0].id, { thread_id: t2.id, run_id: run.id })).type,
};
const runStream = client.beta.threads.runs.stream(t2.id, { assistant_id: ra.id, max_completion_tokens: 4 });
out.run_stream = [];
for await (const event of runStream) out.run_stream.push(event.event);
const both = await client.beta.threads.createAndRunPoll({
  assistant_id: ra.id, max_completion_tokens: 4, thread: { messages: [{ role: "user", content: "hi" }] },
});
out.create_and_run = both.status;
const long = await client.beta.threads.runs.create(t2.id, { assistant_id: ra.id, max_completion_tokens: 3000 });
out.run_cancelled = (await client.beta.threads.runs.cancel(long.id, { thread_id: t2.id })).status;
await client.beta.threads.runs.poll(long.id, { thread_id: t2.id }, { pollIntervalMs: 50 });

// Function tools: a forced call, its output submitted; and a response's function_call.
const weather = {
  name: "get_weather",
  parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Oslo"] } },
                required: ["city"], additionalProperties: false },
};
const ta = await client.beta.assistants.create({ model, temperature: 0, tools: [{ type: "function", function: weather }] });
const tt = await client.beta.threads.create({ messages: [{ role: "user", content: "Weather in Oslo?" }] });
const asked = await client.beta.threads.runs.createAndPoll(tt.id, {
  assistant_id: ta.id, tool_choice: "required", max_completion_tokens: 40,
});
const call = asked.required_action?.submit_tool_outputs.tool_calls[0];
const answered = await client.beta.threads.runs.submitToolOutputsAndPoll(asked.id, {
  thread_id: tt.id, tool_outputs: [{ tool_call_id: call?.id, output: "22 C" }],
});
out.tools = { asked: asked.status, name: call?.function.name, answered: answered.status };
const fr = await client.responses.create({
  model, input: "Weather in Oslo?", tools: [{ type: "function", ...weather, strict: true }], tool_choice: "required",
});
out.function_call = fr.output.map((o) => o.type);

// Conversations and their items.
const conv = await client.conversations.create({ items: [{ type: "message", role: "user", content: "hi" }], metadata: { c: "1" } });
out.conversation = {
  retrieved: (await client.conversations.retrieve(conv.id)).metadata,
  updated: (await client.conversations.update(conv.id, { metadata: { c: "2" } })).metadata,
};
const added = await client.conversations.items.create(conv.id, { items: [{ type: "message", role: "user", content: "more" }] });
const itemId = added.data[0].id;
out.items = {
  listed: (await client.conversations.items.list(conv.id, { order: "asc" })).data.length,
  retrieved: (await client.conversations.items.retrieve(itemId, { conversation_id: conv.id })).type,
  after_delete: (await client.conversations.items.delete(itemId, { conversation_id: conv.id })).id,
};
out.conversation_deleted = (await client.conversations.delete(conv.id)).deleted;
console.log(JSON.stringify(out));
