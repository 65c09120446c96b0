/**
 * Structured output and tool calls against the real server entry with the demo model (which
 * knows no JSON): every constrained output parses and validates against its schema by an
 * independent validator (ajv + ajv-formats), across schemas and seeds, whole and streamed,
 * with n > 1 and beside unconstrained requests; tool calls with tool_choice required / named
 * through the `openai` client, the AI SDK and LangChain; bad schemas are 400s.
 */
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, Output, streamText, tool } from "ai";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { expect } from "chai";
import OpenAI, { APIError } from "openai";
import { z } from "zod";

import { serveWithOpenAi } from "./serverProcess.js";

const MODEL = "brown-gpt";
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;
const ajv = addFormats(new Ajv2020({ strict: false }));

function validates(schema: object, text: string): void {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error(`not JSON: ${JSON.stringify(text)}`);
  }
  const validate = ajv.compile(schema);
  expect(validate(value), `${text}\n${JSON.stringify(validate.errors)}`).to.equal(true);
}

// The demo model knows no JSON: it closes a string or a number only when the schema makes it
// (maxLength, minimum/maximum), so every schema here bounds them; unbounded ones may run to
// max_tokens (finish_reason "length"), as on any server.
const SCHEMAS: Record<string, object> = {
  flat: {
    type: "object",
    properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer", minimum: 0, maximum: 99 }, ok: { type: "boolean" } },
    required: ["name", "age", "ok"],
    additionalProperties: false,
  },
  nested: {
    type: "object",
    properties: {
      city: { type: "string", enum: ["Paris", "Rome", "Oslo"] },
      tags: { type: "array", items: { type: "string", maxLength: 6 }, minItems: 1, maxItems: 3 },
      // Bounds are exact (numericBounds.ts); structuredOutputGuided.test.ts bounds numbers too.
      point: { type: "object", properties: { x: { type: "integer", minimum: -50, maximum: 50 }, y: { enum: [0.5, 1.25, 2] } }, required: ["x", "y"], additionalProperties: false },
      note: { type: "null" },
    },
    required: ["city", "tags", "point", "note"],
    additionalProperties: false,
  },
  refsAndAnyOf: {
    $defs: { item: { type: "object", properties: { id: { type: "integer", minimum: 0, maximum: 999 }, kind: { const: "item" } }, required: ["id", "kind"], additionalProperties: false } },
    type: "object",
    properties: {
      first: { $ref: "#/$defs/item" },
      value: { anyOf: [{ type: "integer", minimum: 1, maximum: 9 }, { type: "string", minLength: 1, maxLength: 4 }] },
    },
    required: ["first", "value"],
    additionalProperties: false,
  },
};

describe("structured output and tool calls (npm start, demo model)", function () {
  this.timeout(300000);
  const served = serveWithOpenAi();

  for (const [name, schema] of Object.entries(SCHEMAS)) {
    it(`json_schema "${name}": every seed's output validates, whole and streamed, n = 2`, async () => {
      for (const seed of [1, 2, 3, 4, 5, 6]) {
        const done = await served.client.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: "Describe a person." }],
          response_format: { type: "json_schema", json_schema: { name, schema: schema as Record<string, unknown>, strict: true } },
          max_tokens: 300,
          seed,
          n: 2,
          temperature: 1,
        });
        expect(done.choices).to.have.length(2);
        for (const choice of done.choices) {
          expect(choice.finish_reason).to.equal("stop");
          validates(schema, choice.message.content!);
        }
        const stream = await served.client.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: "Describe a person." }],
          response_format: { type: "json_schema", json_schema: { name, schema: schema as Record<string, unknown>, strict: true } },
          max_tokens: 300,
          seed: seed + 10,
          stream: true,
        });
        let text = "";
        let finish: string | null = null;
        for await (const chunk of stream) {
          text += chunk.choices[0]?.delta.content ?? "";
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        expect(finish).to.equal("stop");
        validates(schema, text);
      }
    });
  }

  it("json_object on /v1/completions and /generate, concurrently with unconstrained requests", async () => {
    const constrained = Array.from({ length: 4 }, (_unused, i) =>
      served.client.completions.create({ model: MODEL, prompt: "Data:", max_tokens: 200, seed: i, response_format: { type: "json_object" } } as never),
    );
    const free = Array.from({ length: 4 }, (_unused, i) => served.client.completions.create({ model: MODEL, prompt: "The jury", max_tokens: 40, seed: i }));
    const generate = fetch(`${served.base}/generate`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Data:", max_new_tokens: 200, seed: 5, response_format: { type: "json_object" } }),
    }).then((r) => r.json() as Promise<{ text: string }>);
    const [results, frees, spec] = await Promise.all([Promise.all(constrained), Promise.all(free), generate]);
    for (const done of results as unknown as OpenAI.Completion[]) {
      const text = done.choices[0]!.text;
      if (done.choices[0]!.finish_reason === "stop") expect(JSON.parse(text)).to.be.an("object");
    }
    for (const done of frees) expect(done.choices[0]!.text.length).to.be.greaterThan(0);
    expect(spec.text.startsWith("{")).to.equal(true);
  });

  it("max_tokens cuts a constraint: finish_reason length", async () => {
    const done = await served.client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "x" }],
      response_format: { type: "json_schema", json_schema: { name: "s", schema: { type: "object", properties: { text: { type: "string", minLength: 50 } }, required: ["text"] } } },
      max_tokens: 5,
    });
    expect(done.choices[0]!.finish_reason).to.equal("length");
  });

  it("a schema or grammar that cannot be compiled is a 400 naming the problem", async () => {
    for (const schema of [{ type: "objectx" }, { type: "object", properties: { a: { type: 5 } } }]) {
      try {
        await served.client.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: "x" }],
          response_format: { type: "json_schema", json_schema: { name: "bad", schema } },
        });
        expect.fail("accepted a bad schema");
      } catch (err) {
        expect(err).to.be.instanceOf(APIError);
        expect((err as APIError).status).to.equal(400);
        expect((err as APIError).message).to.match(/schema/i);
      }
    }
    // A tool whose parameters are not a schema, under a required choice (which compiles them).
    try {
      await served.client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: "x" }],
        tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { a: { type: "nope" } } } } }],
        tool_choice: "required",
      });
      expect.fail("accepted bad tool parameters");
    } catch (err) {
      expect((err as APIError).status).to.equal(400);
      expect((err as APIError).message).to.match(/schema is invalid/i);
    }
    const res = await fetch(`${served.base}/generate/stream`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ prompt: "x", response_format: { type: "json_schema", json_schema: { schema: { type: "nope" } } } }),
    });
    expect(res.status).to.equal(400);
  });

  const weather = {
    type: "function" as const,
    function: {
      name: "get_weather",
      description: "Weather of a city",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city", "days"], additionalProperties: false },
    },
  };
  const time = {
    type: "function" as const,
    function: { name: "get_time", parameters: { type: "object", properties: { zone: { type: "string", enum: ["UTC", "CET"] } }, required: ["zone"], additionalProperties: false } },
  };

  it("openai: tool_choice required and named give tool_calls whose arguments validate; streamed as deltas", async () => {
    for (const seed of [1, 2, 3]) {
      const done = await served.client.chat.completions.create({
        model: MODEL,
        messages: [{ role: "user", content: "Weather in Paris?" }],
        tools: [weather, time],
        tool_choice: "required",
        // With parallel calls the demo model, which knows no tool calling, may go on adding calls to max_tokens.
        parallel_tool_calls: seed === 3,
        max_tokens: 300,
        seed,
      });
      if (seed === 3 && done.choices[0]!.finish_reason === "length") continue;
      const choice = done.choices[0]!;
      expect(choice.finish_reason).to.equal("tool_calls");
      expect(choice.message.tool_calls!.length).to.be.greaterThan(0);
      for (const call of choice.message.tool_calls!) {
        if (call.type !== "function") throw new Error("not a function call");
        expect(call.id).to.be.a("string");
        const tool = [weather, time].find((t) => t.function.name === call.function.name)!;
        validates(tool.function.parameters, call.function.arguments);
      }
    }
    const named = await served.client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Time?" }],
      tools: [weather, time],
      tool_choice: { type: "function", function: { name: "get_time" } },
      parallel_tool_calls: false,
      max_tokens: 200,
      seed: 4,
    });
    const calls = named.choices[0]!.message.tool_calls!;
    expect(calls).to.have.length(1);
    const only = calls[0] as { function: { name: string; arguments: string } };
    expect(only.function.name).to.equal("get_time");
    validates(time.function.parameters, only.function.arguments);

    const stream = await served.client.chat.completions.create({
      model: MODEL,
      messages: [{ role: "user", content: "Weather in Paris?" }],
      tools: [weather],
      tool_choice: "required",
      parallel_tool_calls: false,
      max_tokens: 300,
      seed: 7,
      stream: true,
    });
    const args: string[] = [];
    let name: string | undefined;
    let finish: string | null = null;
    let firstHadName: boolean | undefined;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      for (const delta of choice.delta.tool_calls ?? []) {
        if (firstHadName === undefined) firstHadName = delta.function?.name !== undefined;
        name ??= delta.function?.name;
        if (delta.function?.arguments) args.push(delta.function.arguments);
      }
      finish = choice.finish_reason ?? finish;
    }
    expect(firstHadName).to.equal(true);
    expect(name).to.equal("get_weather");
    expect(finish).to.equal("tool_calls");
    validates(weather.function.parameters, args.join(""));

    // The call and its result in the history: the next turn renders and answers.
    const followUp = await served.client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris", "days": 1}' } }] },
        { role: "tool", tool_call_id: "call_1", content: "sunny" },
      ],
      tools: [weather],
      tool_choice: "none",
      max_tokens: 8,
    });
    expect(followUp.choices[0]!.message.content).to.be.a("string");
  });

  it("the AI SDK: generateText with tools and toolChoice, Output.object, streamText with tools", async () => {
    const compatible = createOpenAICompatible({ name: "torchserve", baseURL: `${served.base}/v1`, apiKey: "unused", supportsStructuredOutputs: true });
    const model = compatible.chatModel(MODEL);
    const openai = createOpenAI({ baseURL: `${served.base}/v1`, apiKey: "unused" }).chat(MODEL);
    const parameters = z.object({ city: z.string().max(20), days: z.number().int().min(1).max(7) });
    const tools = { get_weather: tool({ description: "Weather of a city", inputSchema: parameters }) };
    const single = { openai: { parallelToolCalls: false } };
    const called = await generateText({ model: openai, prompt: "Weather in Paris?", tools, toolChoice: "required", maxOutputTokens: 300, seed: 1, providerOptions: single });
    expect(called.toolCalls.length).to.be.greaterThan(0);
    expect(called.toolCalls[0]!.toolName).to.equal("get_weather");
    expect(parameters.safeParse(called.toolCalls[0]!.input).success).to.equal(true);
    expect(called.finishReason).to.equal("tool-calls");

    const person = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(99) });
    const structured = await generateText({ model, prompt: "A person.", output: Output.object({ schema: person }), maxOutputTokens: 300, seed: 2 });
    expect(person.safeParse(structured.output).success).to.equal(true);

    const streamed = streamText({ model, prompt: "Weather in Paris?", tools, toolChoice: { type: "tool", toolName: "get_weather" }, maxOutputTokens: 300, seed: 3 });
    const calls = await streamed.toolCalls;
    expect(calls).to.have.length.greaterThan(0);
    expect(parameters.safeParse(calls[0]!.input).success).to.equal(true);
  });

  it("LangChain: bindTools with tool_choice and withStructuredOutput", async () => {
    const chat = new ChatOpenAI({ model: MODEL, apiKey: "unused", configuration: { baseURL: `${served.base}/v1` }, maxTokens: 300, temperature: 1, maxRetries: 0 });
    const parameters = z.object({ city: z.string().max(20), days: z.number().int().min(1).max(7) });
    const bound = chat.bindTools([{ name: "get_weather", description: "Weather of a city", schema: parameters }], { tool_choice: "get_weather" });
    const reply = await bound.invoke("Weather in Paris?");
    expect(reply.tool_calls).to.have.length.greaterThan(0);
    expect(reply.tool_calls![0]!.name).to.equal("get_weather");
    expect(parameters.safeParse(reply.tool_calls![0]!.args).success).to.equal(true);

    const person = z.object({ name: z.string().max(12), age: z.number().int().min(0).max(99) });
    const structured = chat.withStructuredOutput(person, { name: "person", method: "jsonSchema" });
    const value = await structured.invoke("A person.");
    expect(person.safeParse(value).success).to.equal(true);
  });
});
