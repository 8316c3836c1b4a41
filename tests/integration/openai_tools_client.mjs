// Asks shardlm for tool calls with the official `openai` npm package (a client nobody here
// wrote) and prints what the package made of them, as one JSON object: the non-streamed
// message, and a streamed one assembled by the package's own ChatCompletionStream.
//
//   node tests/integration/openai_tools_client.mjs BASE_URL MODEL PROMPT TOOLS_JSON NPM_DIR
//
// TOOLS_JSON is the `tools` list; the first tool is named in tool_choice, and "required" is
// asked too. Greedy (temperature 0).
import { createRequire } from "node:module";
import path from "node:path";

const [baseURL, model, prompt, toolsJson, npmDir] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, "noop.js"));
const OpenAI = require("openai");

const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 300000 });
const tools = JSON.parse(toolsJson);
const messages = [{ role: "user", content: prompt }];
const named = { type: "function", function: { name: tools[0].function.name } };
const out = {};

const calls = (m) => (m.tool_calls || []).map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments }));

const required = await client.chat.completions.create({ model, messages, tools, tool_choice: "required", temperature: 0, max_tokens: 200 });
out.required = { finish_reason: required.choices[0].finish_reason, content: required.choices[0].message.content, calls: calls(required.choices[0].message) };

const stream = client.chat.completions.stream({ model, messages, tools, tool_choice: named, temperature: 0, max_tokens: 200 });
const final = await stream.finalChatCompletion();
out.streamed = { finish_reason: final.choices[0].finish_reason, content: final.choices[0].message.content, calls: calls(final.choices[0].message) };

console.log(JSON.stringify(out));
