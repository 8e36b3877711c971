// Official Node clients against a running gateway (TOOLGATE_URL): the
// openai SDK (Responses and chat completions), Vercel's AI SDK with
// `openai(model)`, whose default is the Responses API, and Google's
// @google/genai on the Gemini face. Run by tests/python/test_node_clients.py
// with the Node 22 these packages need.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { GoogleGenAI } from "@google/genai";
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

// Google's @google/genai: its own paths (`/v1beta/models/…`), its key
// header, the model in the path.
const google = new GoogleGenAI({
  apiKey: "not-needed",
  httpOptions: { baseUrl: process.env.TOOLGATE_URL },
});

test("@google/genai generateContent answers", async () => {
  const r = await google.models.generateContent({
    model: "mock-model",
    contents: "hello there",
  });
  assert.equal(r.text, "Hello! You said: hello there");
  assert.equal(r.candidates[0].finishReason, "STOP");
});

test("@google/genai generateContentStream streams the same answer", async () => {
  const stream = await google.models.generateContentStream({
    model: "mock-model",
    contents: "hello stream",
  });
  let text = "";
  let chunks = 0;
  for await (const chunk of stream) {
    text += chunk.text ?? "";
    chunks += 1;
  }
  assert.equal(text, "Hello! You said: hello stream");
  assert.ok(chunks > 1, `${chunks} chunks`);
});

test("@google/genai function calling returns the client's own call", async () => {
  const config = {
    tools: [
      {
        functionDeclarations: [
          {
            name: "lookup_x",
            description: "Look x up.",
            parametersJsonSchema: {
              type: "object",
              properties: { q: { type: "string" } },
              required: ["q"],
            },
          },
        ],
      },
    ],
  };
  const ask = { role: "user", parts: [{ text: 'call lookup_x {"q": "a"}' }] };
  const r = await google.models.generateContent({ model: "mock-model", contents: [ask], config });
  assert.equal(r.functionCalls.length, 1);
  const [call] = r.functionCalls;
  assert.equal(call.name, "lookup_x");
  assert.deepEqual(call.args, { q: "a" });
  // The model's content back as it came, and the client's result.
  const answer = {
    role: "user",
    parts: [{ functionResponse: { id: call.id, name: call.name, response: { output: "found a" } } }],
  };
  const next = await google.models.generateContent({
    model: "mock-model",
    contents: [ask, r.candidates[0].content, answer],
    config,
  });
  assert.equal(next.text, "Tool results: [lookup_x] found a");
});

test("@google/genai runs a gateway tool in the loop", async () => {
  const r = await google.models.generateContent({
    model: "mock-model",
    contents: 'call lookup {"q": "rust"}',
  });
  assert.equal(r.text, "Tool results: [lookup] rust");
  assert.equal(r.functionCalls, undefined);
});

test("@google/genai countTokens counts", async () => {
  const r = await google.models.countTokens({
    model: "mock-model",
    contents: "how many tokens is this?",
  });
  assert.ok(Number.isInteger(r.totalTokens) && r.totalTokens > 0, JSON.stringify(r));
});

test("@google/genai models.list ends and names the gateway's models", async () => {
  const names = [];
  for await (const model of await google.models.list()) {
    names.push(model.name);
    assert.ok(names.length < 1000, "the list does not end");
  }
  assert.ok(names.includes("models/mock-model"), JSON.stringify(names));
});
