// kvlaned's HTTP API over TLS through the openai@6 npm client. The test CA comes in through
// NODE_EXTRA_CA_CERTS: nothing here turns certificate checks off.
// Usage: node tls.mjs   (env: KVLANE_URL (https://...), KVLANE_API_KEY, NODE_EXTRA_CA_CERTS)
import assert from "node:assert/strict";
import OpenAI from "openai";
import { check, runChecks } from "./checks.mjs";

const url = process.env.KVLANE_URL;
assert.ok(url.startsWith("https://"), `not an https URL: ${url}`);
const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: process.env.KVLANE_API_KEY, maxRetries: 0 });
const body = { model: "tiny", messages: [{ role: "user", content: "over tls" }], max_tokens: 6, temperature: 0 };

const checks = [
  ["openai: models.list over https", async () => {
    const ids = [];
    for await (const m of openai.models.list()) ids.push(m.id);
    assert.deepEqual(ids, ["tiny"]);
  }],
  ["openai: chat completion over https, streamed equals non-streamed", async () => {
    const whole = await openai.chat.completions.create(body);
    assert.equal(whole.object, "chat.completion");
    assert.equal(whole.usage.completion_tokens, 6);
    let text = "";
    for await (const chunk of await openai.chat.completions.create({ ...body, stream: true }))
      for (const c of chunk.choices) text += c.delta?.content ?? "";
    assert.equal(text, whole.choices[0].message.content);
  }],
  ["openai: a wrong key over https is a 401", async () => {
    const wrong = new OpenAI({ baseURL: `${url}/v1`, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(wrong.chat.completions.create(body), (e) => e.status === 401);
  }],
];

for (const [name, fn] of checks) check(name, fn);
await runChecks();
