// kvlaned's HTTP API through the real npm clients: openai@6 and ollama.
// Usage: node conformance.mjs   (env: KVLANE_URL, KVLANE_API_KEY, KVLANE_CLI, KVLANE_ADMIN_SOCKET)
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import OpenAI from "openai";
import { Ollama } from "ollama";
import { check, runChecks } from "./checks.mjs";

const url = process.env.KVLANE_URL;
const key = process.env.KVLANE_API_KEY;
const model = "tiny";
const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
const ollama = new Ollama({ host: url, headers: { Authorization: `Bearer ${key}` } });

function ps() {
  const out = execFileSync(process.env.KVLANE_CLI,
    ["ps", "--json", "--socket", process.env.KVLANE_ADMIN_SOCKET], { encoding: "utf8" });
  return JSON.parse(out).sequences;
}


check("models.list names the configured models", async () => {
  const ids = [];
  for await (const m of openai.models.list()) ids.push(m.id);
  assert.deepEqual(ids, ["tiny", "slow"]);
});

check("chat completion, non-streaming", async () => {
  const r = await openai.chat.completions.create({
    model, messages: [{ role: "user", content: "hello" }], max_tokens: 8, temperature: 0,
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.usage.completion_tokens, 8);
});

check("chat completion, streaming with usage, equals the non-streamed text", async () => {
  const body = { model, messages: [{ role: "user", content: "stream me" }], max_tokens: 10, temperature: 0 };
  const whole = await openai.chat.completions.create(body);
  const stream = await openai.chat.completions.create({
    ...body, stream: true, stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 10);
});

check("a repeated prompt reports the reused prefix in cached_tokens", async () => {
  const body = {
    model, max_tokens: 4, temperature: 0,
    messages: [{ role: "system", content: "You answer in riddles. ".repeat(8) },
               { role: "user", content: "Where does the river go?" }],
  };
  const first = await openai.chat.completions.create(body);
  assert.equal(first.usage.prompt_tokens_details.cached_tokens, 0);
  const again = await openai.chat.completions.create(body);
  // Every prompt token but the last (whose logits give the first new token) is reused.
  assert.equal(again.usage.prompt_tokens_details.cached_tokens, again.usage.prompt_tokens - 1);
});

check("text completion, streaming and not", async () => {
  const r = await openai.completions.create({ model, prompt: "Once upon", max_tokens: 5, temperature: 0 });
  assert.equal(r.choices[0].finish_reason, "length");
  const s = await openai.completions.create({ model, prompt: "Once upon", max_tokens: 5, temperature: 0, stream: true });
  let text = "";
  for await (const chunk of s) text += chunk.choices[0]?.text ?? "";
  assert.equal(text, r.choices[0].text);
});

check("chat logprobs: one entry per token, top_logprobs sorted, the same streamed", async () => {
  const body = {
    model, messages: [{ role: "user", content: "logprobs" }], max_tokens: 6, temperature: 0,
    logprobs: true, top_logprobs: 3,
  };
  const whole = await openai.chat.completions.create(body);
  const content = whole.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.equal(e.top_logprobs[0].token, e.token); // greedy: the sampled token is the likeliest
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    assert.ok(e.top_logprobs[1].logprob <= e.top_logprobs[0].logprob);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, "utf8")]);
  }
  const stream = await openai.chat.completions.create({ ...body, stream: true });
  const streamed = [];
  for await (const chunk of stream)
    for (const c of chunk.choices) streamed.push(...(c.logprobs?.content ?? []));
  assert.deepEqual(streamed, content);
});

check("a stop string ends the text before it", async () => {
  const body = { model, messages: [{ role: "user", content: "stop here" }], max_tokens: 40, temperature: 0 };
  const full = (await openai.chat.completions.create(body)).choices[0].message.content;
  let at = -1;
  for (let i = 1; i < full.length && at < 0; i++) {
    const c = full.charCodeAt(i);
    if (c > 0x20 && c < 0x7f && full.indexOf(full[i]) === i) at = i;
  }
  assert.ok(at > 0, `no usable stop character in ${JSON.stringify(full)}`);
  const r = await openai.chat.completions.create({ ...body, stop: [full[at]] });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.equal(r.choices[0].message.content, full.slice(0, at));
  const s = await openai.chat.completions.create({ ...body, stop: full[at], stream: true });
  let text = "";
  for await (const chunk of s) text += chunk.choices[0]?.delta?.content ?? "";
  assert.equal(text, full.slice(0, at));
});

check("an AbortController abort cancels the sequence", async () => {
  const controller = new AbortController();
  const stream = await openai.chat.completions.create({
    model: "slow", messages: [{ role: "user", content: "p".repeat(3950) }], max_tokens: 8, stream: true,
  }, { signal: controller.signal });
  assert.equal(ps().length, 1);
  controller.abort();
  // The SDK ends an aborted stream's iteration quietly (or with APIUserAbortError).
  try {
    for await (const _ of stream) { /* drain */ }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError, `unexpected error: ${e}`);
  }
  for (let i = 0; i < 100 && ps().length !== 0; i++) await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(ps(), []);
});

check("SDK error classes for 400, 401 and 404", async () => {
  await assert.rejects(
    openai.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "n");
  await assert.rejects(
    openai.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "x" }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
  const wrong = new OpenAI({ baseURL: `${url}/v1`, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

check("ollama: list, generate streaming, chat non-streaming", async () => {
  const tags = await ollama.list();
  assert.deepEqual(tags.models.map((m) => m.name), ["tiny", "slow"]);
  let text = "", last = null;
  for await (const part of await ollama.generate({ model, prompt: "hi", stream: true, options: { num_predict: 6 } })) {
    text += part.response;
    last = part;
  }
  assert.equal(last.done, true);
  assert.equal(last.eval_count, 6);
  const chat = await ollama.chat({ model, messages: [{ role: "user", content: "x" }], options: { num_predict: 3 } });
  assert.equal(chat.done, true);
  assert.equal(chat.message.role, "assistant");
  assert.equal(chat.eval_count, 3);
  await assert.rejects(ollama.chat({ model: "nope", messages: [{ role: "user", content: "x" }] }),
    (e) => e.status_code === 404);
});

check("embeddings.create: base64 by default, floats on request, the same unit vectors", async () => {
  const input = ["kv caches park on the host", "the compute lane keeps stepping"];
  // Without encoding_format the SDK asks for base64 and decodes it itself.
  const packed = await openai.embeddings.create({ model, input });
  assert.equal(packed.object, "list");
  assert.equal(packed.data.length, 2);
  assert.equal(packed.data[1].index, 1);
  const floats = await openai.embeddings.create({ model, input, encoding_format: "float" });
  for (let i = 0; i < 2; i++) {
    const v = floats.data[i].embedding;
    assert.equal(v.length, 256); // the sim's dimension
    // The same float32 values: base64 carries their bits, JSON their shortest decimal form.
    assert.deepEqual(Array.from(packed.data[i].embedding), v.map(Math.fround));
    const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
  }
  assert.notDeepEqual(floats.data[0].embedding, floats.data[1].embedding);
  assert.ok(floats.usage.prompt_tokens > 0);
  assert.equal(floats.usage.total_tokens, floats.usage.prompt_tokens);
  await assert.rejects(openai.embeddings.create({ model, input: "x", dimensions: 8 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "dimensions");
});

check("ollama: embed and the legacy embeddings give the vectors of /v1/embeddings", async () => {
  const text = "kv caches park on the host";
  const want = (await openai.embeddings.create({ model, input: text, encoding_format: "float" })).data[0].embedding;
  const r = await ollama.embed({ model, input: [text, "another"] });
  assert.equal(r.embeddings.length, 2);
  assert.deepEqual(r.embeddings[0], want);
  assert.ok(r.prompt_eval_count > 0);
  assert.ok(r.total_duration > 0);
  const legacy = await ollama.embeddings({ model, prompt: text });
  assert.deepEqual(legacy.embedding, want);
  await assert.rejects(ollama.embed({ model: "nope", input: "x" }), (e) => e.status_code === 404);
});

// Tool calls and structured output. The tools' prompt needs the larger context of "slow"
// (the sim's tokenizer is one token per byte); its answers are short (enums, small integers).
const weather = {
  type: "function",
  function: {
    name: "get_weather", description: "The weather in a city",
    parameters: {
      type: "object",
      properties: { city: { enum: ["Paris", "Oslo"] }, days: { type: "integer", minimum: 1, maximum: 7 } },
      required: ["city", "days"],
    },
  },
};
function checkWeather(args) {
  assert.deepEqual(Object.keys(args), ["city", "days"]);
  assert.ok(["Paris", "Oslo"].includes(args.city));
  assert.ok(Number.isInteger(args.days) && args.days >= 1 && args.days <= 7);
}
const toolChat = {
  model: "slow", messages: [{ role: "user", content: "Weather in Paris?" }], max_tokens: 120, seed: 5,
  tools: [weather], tool_choice: { type: "function", function: { name: "get_weather" } },
};

check("openai tools: a named function answers with message.tool_calls", async () => {
  const r = await openai.chat.completions.create(toolChat);
  const c = r.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.content, null);
  assert.equal(c.message.tool_calls.length, 1);
  const call = c.message.tool_calls[0];
  assert.equal(call.type, "function");
  assert.match(call.id, /^call_/);
  assert.equal(call.function.name, "get_weather");
  checkWeather(JSON.parse(call.function.arguments));
});

check("openai tools: the SDK's stream helper assembles delta.tool_calls into the same call", async () => {
  const stream = openai.chat.completions.stream({ ...toolChat, stream: true });
  const final = await stream.finalChatCompletion();
  const c = final.choices[0];
  assert.equal(c.finish_reason, "tool_calls");
  assert.equal(c.message.tool_calls.length, 1);
  assert.equal(c.message.tool_calls[0].function.name, "get_weather");
  checkWeather(JSON.parse(c.message.tool_calls[0].function.arguments));
  assert.ok(!(c.message.content ?? "").includes("tool_call"));
});

check("openai tools: a call and its result go back in the conversation; bad tools are 400s", async () => {
  const r = await openai.chat.completions.create({
    model: "slow", max_tokens: 4, tools: [weather], tool_choice: "none",
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
        function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris", days: 1 }) } }] },
      { role: "tool", tool_call_id: "call_1", content: "sunny" },
    ],
  });
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.choices[0].message.tool_calls, undefined);
  await assert.rejects(openai.chat.completions.create({ ...toolChat, tool_choice: { type: "function", function: { name: "nope" } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice.function.name");
  await assert.rejects(openai.chat.completions.create({
    ...toolChat, tool_choice: "auto",
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { x: { type: "string", contentEncoding: "base64" } } } } }],
  }), (e) => e instanceof OpenAI.BadRequestError && e.param === "tools[0].function.parameters" && /contentEncoding/.test(e.message));
});

check("openai response_format json_schema: the content parses and follows the schema", async () => {
  const r = await openai.chat.completions.create({
    model: "slow", messages: [{ role: "user", content: "Pick." }], max_tokens: 60, seed: 2,
    response_format: { type: "json_schema", json_schema: { name: "pick", strict: true, schema: weather.function.parameters } },
  });
  assert.equal(r.choices[0].finish_reason, "stop");
  checkWeather(JSON.parse(r.choices[0].message.content));
});

check("ollama: format as a schema answers JSON that follows it; tool history is accepted", async () => {
  const r = await ollama.chat({
    model: "slow", messages: [{ role: "user", content: "Pick." }], stream: false,
    format: weather.function.parameters, options: { num_predict: 60, seed: 2 },
  });
  checkWeather(JSON.parse(r.message.content));
  const h = await ollama.chat({
    model: "slow", stream: false, tools: [weather], options: { num_predict: 2 },
    format: weather.function.parameters,
    messages: [
      { role: "user", content: "Weather in Oslo?" },
      { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Oslo", days: 2 } } }] },
      { role: "tool", content: "cold", tool_name: "get_weather" },
    ],
  });
  assert.equal(h.done, true);
});

await runChecks();
