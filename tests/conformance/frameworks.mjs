// kvlaned's structured output and tool calls through agent frameworks: LangChain
// (@langchain/openai, @langchain/ollama) and the Vercel AI SDK (ai, @ai-sdk/openai-compatible).
// Each check records the requests the framework sends (its own fetch is wrapped), asserts the
// shape it chose (json_schema or function calling, strict flags, tool_choice), and validates
// every object and every call's arguments with ajv against the JSON Schema that request carried.
// Usage: node frameworks.mjs   (env: KVLANE_URL, KVLANE_API_KEY; the model "fast" is a sim
// with a 4096-token context, as the tools' prompt is long at one token per byte)
import assert from "node:assert/strict";
import { Ajv } from "ajv";
import { Ajv2020 } from "ajv/dist/2020.js";
import { z } from "zod";
import { ChatOpenAI } from "@langchain/openai";
import { ChatOllama } from "@langchain/ollama";
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages";
import { generateObject, generateText, stepCountIs, streamObject, streamText, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { check, runChecks } from "./checks.mjs";

const url = process.env.KVLANE_URL;
const key = process.env.KVLANE_API_KEY;
const model = "fast";

// Every request any framework sends, as {path, body}; each check starts with it empty.
let sent = [];
async function recording(input, init) {
  const target = new URL(input instanceof Request ? input.url : String(input));
  sent.push({ path: target.pathname, body: JSON.parse(init?.body ?? "null") });
  return fetch(input, init);
}
// The body of the one request sent to `path` since the check began.
function onlyRequest(path) {
  const bodies = sent.filter((r) => r.path === path).map((r) => r.body);
  assert.equal(bodies.length, 1, `requests to ${path}: ${JSON.stringify(sent)}`);
  return bodies[0];
}

// ajv for the dialect the schema names (zod writes 2020-12, the AI SDK draft-07).
const ajv07 = new Ajv({ allErrors: true });
const ajv2020 = new Ajv2020({ allErrors: true });
function assertValid(schema, value) {
  const ajv = String(schema.$schema ?? "").includes("2020-12") ? ajv2020 : ajv07;
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${JSON.stringify(value)} does not follow ${JSON.stringify(schema)}: ` +
    ajv.errorsText(validate.errors));
}

// The schema of every check: an enum, a bounded integer and a short array of short strings.
const Weather = z.object({
  city: z.enum(["Paris", "Oslo"]),
  days: z.number().int().min(1).max(7),
  notes: z.array(z.string().max(12)).max(2),
}).describe("The weather in a city");
const weatherTool = { name: "get_weather", description: "The weather in a city", schema: Weather };


check("ajv rejects what the schema forbids (so the checks below can fail)", async () => {
  const schema = z.toJSONSchema(Weather);
  assert.throws(() => assertValid(schema, { city: "Rome", days: 2, notes: [] }), /must be equal to one of/);
  assert.throws(() => assertValid(schema, { city: "Oslo", days: 8, notes: [] }), /must be <= 7/);
  assert.throws(() => assertValid(schema, { city: "Oslo", days: 1, notes: ["x".repeat(13)] }), /NOT have more than 12/);
});

// LangChain through the OpenAI API.
const lcOpenAI = new ChatOpenAI({
  model, apiKey: key, configuration: { baseURL: `${url}/v1`, fetch: recording },
  maxTokens: 200, temperature: 0, maxRetries: 0,
});

check("langchain openai: withStructuredOutput sends a strict json_schema; the object follows it", async () => {
  const { raw, parsed } = await lcOpenAI.withStructuredOutput(Weather, { name: "weather", includeRaw: true })
    .invoke("Weather in Paris?");
  const { response_format: rf } = onlyRequest("/v1/chat/completions");
  assert.equal(rf.type, "json_schema");
  assert.equal(rf.json_schema.name, "weather");
  assert.equal(rf.json_schema.strict, true);
  assertValid(rf.json_schema.schema, parsed);
  assert.deepEqual(JSON.parse(raw.content), parsed);
});

check("langchain openai: withStructuredOutput by function calling forces the function", async () => {
  const parsed = await lcOpenAI.withStructuredOutput(Weather, { name: "weather", method: "functionCalling" })
    .invoke("Weather in Oslo?");
  const body = onlyRequest("/v1/chat/completions");
  assert.deepEqual(body.tool_choice, { type: "function", function: { name: "weather" } });
  assert.equal(body.response_format, undefined);
  assertValid(body.tools[0].function.parameters, parsed);
});

check("langchain openai: bindTools with tool_choice \"any\" and no parallel calls gives one tool_call", async () => {
  const m = await lcOpenAI.bindTools([weatherTool], { tool_choice: "any", parallel_tool_calls: false, strict: true })
    .invoke("Weather?");
  const body = onlyRequest("/v1/chat/completions");
  assert.equal(body.tool_choice, "required");
  assert.equal(body.parallel_tool_calls, false);
  assert.equal(body.tools[0].function.strict, true);
  assert.equal(m.response_metadata.finish_reason, "tool_calls");
  assert.equal(m.tool_calls.length, 1);
  const [call] = m.tool_calls;
  assert.equal(call.type, "tool_call");
  assert.equal(call.name, "get_weather");
  assert.match(call.id, /^call_/);
  assertValid(body.tools[0].function.parameters, call.args);
});

check("langchain openai: .stream of a named tool assembles the call invoke returns", async () => {
  const llm = lcOpenAI.bindTools([weatherTool], { tool_choice: "get_weather" });
  const whole = await llm.invoke("Weather in Oslo?");
  const body = onlyRequest("/v1/chat/completions");
  assert.deepEqual(body.tool_choice, { type: "function", function: { name: "get_weather" } });
  sent = [];
  let acc;
  for await (const chunk of await llm.stream("Weather in Oslo?")) acc = acc === undefined ? chunk : acc.concat(chunk);
  const streamed = onlyRequest("/v1/chat/completions");
  assert.equal(streamed.stream, true);
  assert.deepEqual(streamed.stream_options, { include_usage: true });
  assert.ok(whole.usage_metadata.output_tokens > 0);
  assert.equal(acc.usage_metadata.output_tokens, whole.usage_metadata.output_tokens);
  assert.equal(acc.tool_calls.length, 1);
  assert.equal(acc.tool_calls[0].name, "get_weather");
  assert.deepEqual(acc.tool_calls[0].args, whole.tool_calls[0].args);
  assertValid(body.tools[0].function.parameters, acc.tool_calls[0].args);
  assert.equal(acc.content, "");
});

check("langchain openai: a tool call and its ToolMessage go back; tool_choice \"none\" answers text", async () => {
  const m = await lcOpenAI.bindTools([weatherTool], { tool_choice: "none" }).invoke([
    new HumanMessage("Weather in Paris?"),
    new AIMessage({ content: "", tool_calls: [{ id: "call_1", name: "get_weather", args: { city: "Paris", days: 1, notes: [] } }] }),
    new ToolMessage({ tool_call_id: "call_1", content: "sunny" }),
  ]);
  const { messages } = onlyRequest("/v1/chat/completions");
  assert.equal(messages[1].tool_calls[0].function.name, "get_weather");
  assert.deepEqual(messages[2], { role: "tool", content: "sunny", tool_call_id: "call_1" });
  assert.ok(["stop", "length"].includes(m.response_metadata.finish_reason), m.response_metadata.finish_reason);
  assert.equal(typeof m.content, "string");
  assert.deepEqual(m.tool_calls, []);
});

// LangChain through the Ollama API (which has no tool_choice: a tool call cannot be forced).
const lcOllama = new ChatOllama({
  model, baseUrl: url, headers: { Authorization: `Bearer ${key}` }, fetch: recording,
  numPredict: 200, temperature: 0,
});

check("langchain ollama: withStructuredOutput sends the schema as format; the object follows it", async () => {
  const parsed = await lcOllama.withStructuredOutput(Weather).invoke("Weather in Paris?");
  const body = onlyRequest("/api/chat");
  assert.equal(body.format.type, "object");
  assertValid(body.format, parsed);
  // The same through .stream: the framework parses the assembled content.
  sent = [];
  let last;
  for await (const part of await lcOllama.withStructuredOutput(Weather).stream("Weather in Paris?")) last = part;
  assert.deepEqual(last, parsed);
});

check("langchain ollama: bindTools sends Ollama's tool shape; a call and its result go back", async () => {
  const m = await lcOllama.bindTools([weatherTool]).invoke([
    new HumanMessage("Weather in Oslo?"),
    new AIMessage({ content: "", tool_calls: [{ id: "call_1", name: "get_weather", args: { city: "Oslo", days: 2, notes: [] } }] }),
    new ToolMessage({ tool_call_id: "call_1", content: "cold" }),
  ]);
  const body = onlyRequest("/api/chat");
  assert.equal(body.tools[0].type, "function");
  assert.equal(body.tools[0].function.name, "get_weather");
  assert.equal(body.tools[0].function.parameters.type, "object");
  assert.deepEqual(body.messages[1].tool_calls[0].function.arguments, { city: "Oslo", days: 2, notes: [] });
  assert.equal(body.messages[2].role, "tool");
  // Unforced, the sim answers text; whatever it answers, no call syntax leaks into the content.
  assert.equal(typeof m.content, "string");
  assert.ok(!m.content.includes("<tool_call>"), m.content);
  for (const call of m.tool_calls) assertValid(body.tools[0].function.parameters, call.args);
});

// The Vercel AI SDK through the OpenAI-compatible provider.
const sdk = createOpenAICompatible({
  name: "kvlane", baseURL: `${url}/v1`, apiKey: key, fetch: recording, supportsStructuredOutputs: true,
});
const common = { model: sdk(model), maxOutputTokens: 200, temperature: 0, maxRetries: 0 };

check("ai sdk: generateObject sends a strict json_schema; streamObject assembles the same object", async () => {
  const { object, finishReason } = await generateObject({ ...common, schema: Weather, schemaName: "weather", prompt: "Pick." });
  const { response_format: rf } = onlyRequest("/v1/chat/completions");
  assert.equal(rf.type, "json_schema");
  assert.equal(rf.json_schema.strict, true);
  assert.equal(rf.json_schema.name, "weather");
  assert.equal(finishReason, "stop");
  assertValid(rf.json_schema.schema, object);
  sent = [];
  const s = streamObject({ ...common, schema: Weather, schemaName: "weather", prompt: "Pick." });
  const partials = [];
  for await (const p of s.partialObjectStream) partials.push(p);
  assert.equal(onlyRequest("/v1/chat/completions").stream, true);
  assert.deepEqual(await s.object, object);
  assert.ok(partials.length > 1, `${partials.length} partial objects`);
});

check("ai sdk and langchain: a zod tagged union (oneOf) and unbounded numbers are enforced", async () => {
  const Reading = z.object({
    at: z.discriminatedUnion("kind", [
      z.object({ kind: z.literal("station"), id: z.number().int().min(0).max(99) }),
      z.object({ kind: z.literal("point"), lat: z.number(), lon: z.number() }),
    ]),
  });
  const { object } = await generateObject({ ...common, schema: Reading, prompt: "Where?" });
  const parsed = await lcOpenAI.withStructuredOutput(Reading, { name: "reading" }).invoke("Where?");
  assert.equal(sent.length, 2);
  for (const [body, value] of [[sent[0].body, object], [sent[1].body, parsed]]) {
    const schema = body.response_format.json_schema.schema;
    assert.equal(schema.properties.at.oneOf.length, 2);
    assertValid(schema, value);
    for (const n of Object.values(value.at)) if (typeof n === "number") assert.ok(Number.isFinite(n), `${n}`);
  }
});

const sdkTools = { get_weather: tool({ description: "The weather in a city", inputSchema: Weather }) };

check("ai sdk: generateText with a named toolChoice returns the SDK's tool-call", async () => {
  const r = await generateText({ ...common, tools: sdkTools, toolChoice: { type: "tool", toolName: "get_weather" }, prompt: "Weather?" });
  const body = onlyRequest("/v1/chat/completions");
  assert.deepEqual(body.tool_choice, { type: "function", function: { name: "get_weather" } });
  assert.equal(r.finishReason, "tool-calls");
  assert.equal(r.toolCalls.length, 1);
  const [call] = r.toolCalls;
  assert.equal(call.type, "tool-call");
  assert.equal(call.toolName, "get_weather");
  assert.match(call.toolCallId, /^call_/);
  assertValid(body.tools[0].function.parameters, call.input);
});

check("ai sdk: streamText with toolChoice \"required\" streams the call generateText returns", async () => {
  const args = { ...common, tools: sdkTools, toolChoice: "required", prompt: "Weather in Paris?" };
  const whole = await generateText(args);
  const body = onlyRequest("/v1/chat/completions");
  assert.equal(body.tool_choice, "required");
  sent = [];
  const s = streamText(args);
  const deltas = [];
  for await (const part of s.fullStream) if (part.type === "tool-input-delta") deltas.push(part.delta);
  assert.ok(deltas.length > 1, `${deltas.length} argument deltas`);
  const calls = await s.toolCalls;
  assert.equal(await s.finishReason, "tool-calls");
  assert.equal(calls.length, 1);
  assert.equal(calls[0].toolName, "get_weather");
  assert.deepEqual(calls[0].input, whole.toolCalls[0].input);
  assert.deepEqual(JSON.parse(deltas.join("")), calls[0].input);
  assertValid(body.tools[0].function.parameters, calls[0].input);
});

check("ai sdk: a two-step agent runs the forced tool and answers with its result in the history", async () => {
  const runs = [];
  const r = await generateText({
    ...common, prompt: "Weather in Oslo?", stopWhen: stepCountIs(2),
    tools: { get_weather: tool({ ...sdkTools.get_weather, execute: async (input) => (runs.push(input), "cold") }) },
    prepareStep: ({ stepNumber }) => ({
      toolChoice: stepNumber === 0 ? { type: "tool", toolName: "get_weather" } : "none",
      maxOutputTokens: stepNumber === 0 ? 200 : 8,
    }),
  });
  assert.equal(sent.length, 2);
  const [first, second] = sent.map((s) => s.body);
  assert.equal(runs.length, 1);
  assertValid(first.tools[0].function.parameters, runs[0]);
  assert.equal(second.tool_choice, "none");
  const [assistant, result] = second.messages.slice(-2);
  assert.equal(assistant.tool_calls[0].function.name, "get_weather");
  assert.equal(result.role, "tool");
  assert.equal(result.tool_call_id, assistant.tool_calls[0].id);
  assert.equal(r.steps.length, 2);
  assert.equal(r.finishReason, "length");
  assert.ok(r.text.length > 0);
});

await runChecks(() => { sent = []; });
