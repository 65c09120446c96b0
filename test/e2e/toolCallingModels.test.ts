/**
 * Tool calling on exported Llama-family checkpoints whose chat templates are the real ones
 * (Llama 3.2: JSON `{"name", "parameters"}` calls; Qwen2.5: Hermes `<tool_call>` blocks;
 * test/model/python/make_hf_fixture.py llama3-tools / qwen2-tools, byte-level BPE
 * vocabularies), through the server entry and the `openai` client: tool_choice required and
 * named give calls in the template's format whose arguments validate, streamed as deltas;
 * structured output validates; a history with a call and its result renders.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import { expect } from "chai";
import OpenAI from "openai";

import { exportHfFixtures, type HfCheckpoints } from "../helpers/hfModels.js";
import { ServerProcess } from "./serverProcess.js";

const ajv = new Ajv2020({ strict: false });
const weather = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 }, days: { type: "integer", minimum: 1, maximum: 7 } }, required: ["city", "days"], additionalProperties: false },
  },
};
const time = {
  type: "function" as const,
  function: { name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["UTC", "CET"] } }, required: ["zone"], additionalProperties: false } },
};

function validArguments(call: { function: { name: string; arguments: string } }): void {
  const tool = [weather, time].find((t) => t.function.name === call.function.name);
  expect(tool, call.function.name).to.not.equal(undefined);
  const validate = ajv.compile(tool!.function.parameters);
  expect(validate(JSON.parse(call.function.arguments)), `${call.function.arguments} ${JSON.stringify(validate.errors)}`).to.equal(true);
}

describe("tool calling on Llama 3.2 and Qwen2.5 templates (exported checkpoints, npm start)", function () {
  this.timeout(300000);
  let fixtures: HfCheckpoints;
  before(() => {
    fixtures = exportHfFixtures(["llama3-tools", "qwen2-tools"]);
  });
  after(() => fixtures?.cleanup());

  for (const name of ["llama3-tools", "qwen2-tools"]) {
    describe(name, () => {
      let server: ServerProcess;
      let client: OpenAI;
      let model: string;
      before(async () => {
        server = new ServerProcess({ LOG_LEVEL: "info", SERVICE_CKPT: fixtures.path(name) });
        const base = (await server.ready()).text;
        client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
        model = (await client.models.list()).data[0]!.id;
      });
      after(async () => {
        const exit = await server?.stop();
        expect(exit?.code, server?.transcript()).to.equal(0);
      });

      it("tool_choice required and named: calls in the template's format, arguments valid, whole and streamed", async () => {
        for (const seed of [1, 2, 3, 4]) {
          const done = await client.chat.completions.create({
            model,
            messages: [{ role: "user", content: "What is the weather in Paris?" }],
            tools: [weather, time],
            tool_choice: seed % 2 === 0 ? "required" : { type: "function", function: { name: "get_weather" } },
            parallel_tool_calls: false,
            max_tokens: 200,
            seed,
          });
          const choice = done.choices[0]!;
          expect(choice.finish_reason, JSON.stringify(choice)).to.equal("tool_calls");
          expect(choice.message.tool_calls).to.have.length(1);
          validArguments(choice.message.tool_calls![0] as { function: { name: string; arguments: string } });
        }
        const stream = await client.chat.completions.create({
          model,
          messages: [{ role: "user", content: "What is the weather in Paris?" }],
          tools: [weather],
          tool_choice: "required",
          parallel_tool_calls: false,
          max_tokens: 200,
          seed: 9,
          stream: true,
        });
        let callName: string | undefined;
        let args = "";
        let finish: string | null = null;
        for await (const chunk of stream) {
          for (const delta of chunk.choices[0]?.delta.tool_calls ?? []) {
            callName ??= delta.function?.name;
            args += delta.function?.arguments ?? "";
          }
          finish = chunk.choices[0]?.finish_reason ?? finish;
        }
        expect(finish).to.equal("tool_calls");
        validArguments({ function: { name: callName!, arguments: args } });
      });

      it("structured output validates; auto answers without error; a history with a call and its result renders", async () => {
        const schema = { type: "object", properties: { answer: { type: "string", maxLength: 10 }, sure: { type: "boolean" } }, required: ["answer", "sure"], additionalProperties: false };
        const done = await client.chat.completions.create({
          model,
          messages: [{ role: "user", content: "Answer in JSON." }],
          response_format: { type: "json_schema", json_schema: { name: "a", schema } },
          max_tokens: 100,
          seed: 1,
        });
        expect(done.choices[0]!.finish_reason).to.equal("stop");
        const validate = ajv.compile(schema);
        expect(validate(JSON.parse(done.choices[0]!.message.content!)), `${done.choices[0]!.message.content} ${JSON.stringify(validate.errors)}`).to.equal(true);
        const auto = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hi" }], tools: [weather], max_tokens: 16, seed: 2 });
        expect(auto.choices[0]!.finish_reason).to.be.oneOf(["stop", "length", "tool_calls"]);
        const followUp = await client.chat.completions.create({
          model,
          messages: [
            { role: "user", content: "Weather in Paris?" },
            { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris", "days": 1}' } }] },
            { role: "tool", tool_call_id: "call_1", content: "sunny" },
          ],
          tools: [weather],
          max_tokens: 8,
          seed: 3,
        });
        expect(followUp.choices).to.have.length(1);
      });
    });
  }
});
