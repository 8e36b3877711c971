// Official Node clients against a running gateway (TOOLGATE_URL): the
// openai SDK (Responses and chat completions) and Vercel's AI SDK with
// `openai(model)`, whose default is the Responses API. Run by
// tests/python/test_node_clients.py with the Node 22 these packages need.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";

const baseURL = `${process.env.TOOLGATE_URL}/v1`;
const client = new OpenAI({ baseURL, apiKey: "not-needed", maxRetries: 0 });
const provider = createOpenAI({ baseURL, apiKey: "not-needed" });

test("responses.create runs a gateway tool set", async () => {
  const r = await client.responses.create({
    model: "mock-model",
    input: 'call lookup {"q": "rust"}',
    tool_set: "web",
  });
  assert.equal(r.output_text, "Tool results: [lookup] rust");
  assert.deepEqual(
    r.output.map((o) => o.type),
    ["mcp_call", "message"],
  );
});

test("responses.create streams the same answer", async () => {
  const stream = await client.responses.create({
    model: "text-model",
    input: 'call lookup {"q": "go"}',
    stream: true,
  });
  let text = "";
  let last;
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") text += event.delta;
    last = event;
  }
  assert.equal(text, "Tool results: [lookup] go");
  assert.equal(last.type, "response.completed");
  assert.equal(last.response.output_text ?? text, text);
});

test("chat.completions runs a gateway tool set", async () => {
  const r = await client.chat.completions.create({
    model: "mock-model",
    messages: [{ role: "user", content: 'call lookup {"q": "x"}' }],
  });
  assert.equal(r.choices[0].message.content, "Tool results: [lookup] x");
});

function clock(calls) {
  return tool({
    description: "The time in a zone.",
    inputSchema: z.object({ zone: z.string() }),
    execute: async ({ zone }) => {
      calls.push(zone);
      return `12:00 in ${zone}`;
    },
  });
}

for (const model of ["mock-model", "text-model"]) {
  test(`AI SDK generateText with openai(${model}): gateway and client tools`, async () => {
    const calls = [];
    const gateway = await generateText({
      model: provider(model),
      prompt: 'call lookup {"q": "ai"}',
      tools: { get_time: clock(calls) },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    assert.equal(gateway.text, "Tool results: [lookup] ai");
    const own = await generateText({
      model: provider(model),
      prompt: 'call get_time {"zone": "UTC"}',
      tools: { get_time: clock(calls) },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    assert.deepEqual(calls, ["UTC"]);
    assert.match(own.text, /^Tool results: \[get_time\] .*12:00 in UTC/);
  });
}

test("AI SDK streamText with openai(model) and a client tool", async () => {
  const calls = [];
  const result = streamText({
    model: provider("mock-model"),
    prompt: 'call get_time {"zone": "CET"}',
    tools: { get_time: clock(calls) },
    stopWhen: stepCountIs(3),
    maxRetries: 0,
  });
  let text = "";
  for await (const piece of result.textStream) text += piece;
  assert.deepEqual(calls, ["CET"]);
  assert.match(text, /^Tool results: \[get_time\] .*12:00 in CET/);
});
