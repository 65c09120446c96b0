/**
 * Tool calling over real chat templates (Qwen2.5, Llama 3.2, Mistral v0.3, as their
 * tokenizer_config.json ship them) and the default for templates without tools: the format
 * is recognised, tools and a history with calls and results render, model output parses into
 * OpenAI tool_calls, and the streaming parser's deltas (name first, arguments in pieces) add
 * up to the same calls however the text is split. No addon needed.
 */
import { expect } from "chai";
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { parseChat } from "../../src/http/text/openai/requests.js";
import { parseToolCalls, ToolCallStreamParser, toolFormatOf, type StreamPiece, type ToolFormat } from "../../src/http/text/tools/toolCalls.js";
import { repoRoot } from "../helpers/fixtures.js";

const template = (name: string) => readFileSync(join(repoRoot, "test", "fixtures", "chat-templates", name), "utf8");
const TEMPLATES = {
  qwen: template("qwen2.5-instruct.jinja"),
  llama: template("llama-3.2-instruct.jinja"),
  mistral: template("mistral-7b-instruct-v0.3.jinja"),
};

const weather = {
  type: "function",
  function: { name: "get_weather", description: "Weather of a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
};

const history = (id: string) => [
  { role: "user", content: "Weather in Paris?" },
  { role: "assistant", content: null, tool_calls: [{ id, type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] },
  { role: "tool", tool_call_id: id, content: "sunny" },
  { role: "user", content: "And in Rome?" },
];

/** The calls a stream's pieces describe: names from the first delta, arguments concatenated. */
function collect(pieces: StreamPiece[]): { content: string; calls: { name: string; arguments: string }[] } {
  let content = "";
  const calls: { name: string; arguments: string }[] = [];
  for (const piece of pieces) {
    if (piece.kind === "content") content += piece.text;
    else if (piece.id !== undefined) calls[piece.index] = { name: piece.name!, arguments: piece.arguments };
    else calls[piece.index]!.arguments += piece.arguments;
  }
  return { content, calls };
}

describe("tool calls: chat templates, formats and parsers", () => {
  it("recognises each template's format; none for a template without tools", () => {
    expect(toolFormatOf(TEMPLATES.qwen)).to.equal("hermes");
    expect(toolFormatOf(TEMPLATES.llama)).to.equal("llama3");
    expect(toolFormatOf(TEMPLATES.mistral)).to.equal("mistral");
    expect(toolFormatOf("{% for m in messages %}{{ m.content }}{% endfor %}")).to.equal(null);
    expect(toolFormatOf(undefined)).to.equal(null);
  });

  it("renders tools and a history with calls and results as each model expects", () => {
    const qwen = parseChat({ model: "m", messages: history("call_1"), tools: [weather] }, { template: TEMPLATES.qwen });
    expect(qwen.request.prompt).to.include("<tools>\n{");
    expect(qwen.request.prompt).to.include('"name": "get_weather"');
    expect(qwen.request.prompt).to.include('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>');
    expect(qwen.request.prompt).to.include("<tool_response>\nsunny\n</tool_response>");
    expect(qwen.tools).to.deep.equal({ format: "hermes" });

    const llama = parseChat({ model: "m", messages: [{ role: "user", content: "Weather in Paris?" }], tools: [weather] }, { template: TEMPLATES.llama, bosToken: "<|begin_of_text|>" });
    expect(llama.request.prompt).to.include("Environment: ipython");
    expect(llama.request.prompt).to.include('Respond in the format {"name": function name, "parameters"');
    expect(llama.request.prompt).to.include('"name": "get_weather"');
    expect(llama.request.prompt.endsWith("<|start_header_id|>assistant<|end_header_id|>\n\n")).to.equal(true);
    const llamaHistory = parseChat({ model: "m", messages: history("call_1"), tools: [weather] }, { template: TEMPLATES.llama });
    expect(llamaHistory.request.prompt).to.include('{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>');
    // A string is iterable to Jinja: the template prints a tool result with tojson, as transformers does.
    expect(llamaHistory.request.prompt).to.include('<|start_header_id|>ipython<|end_header_id|>\n\n"sunny"<|eot_id|>');

    // Mistral's template wants the user and the assistant to alternate around the tool turns.
    const mistralHistory = [...history("abcDEF123").slice(0, 3), { role: "assistant", content: "Sunny." }, { role: "user", content: "And in Rome?" }];
    const mistral = parseChat({ model: "m", messages: mistralHistory, tools: [weather] }, { template: TEMPLATES.mistral, bosToken: "<s>", eosToken: "</s>" });
    expect(mistral.request.prompt).to.include('[AVAILABLE_TOOLS] [{"type": "function", "function": {"name": "get_weather"');
    expect(mistral.request.prompt).to.include('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}]</s>');
    expect(mistral.request.prompt).to.include('[TOOL_RESULTS] {"content": sunny, "call_id": "abcDEF123"}[/TOOL_RESULTS]');
  });

  it("the default for templates without tools: a system message describing them, calls and results inline", () => {
    const parsed = parseChat({ model: "m", messages: history("call_1"), tools: [weather], tool_choice: "required" }, undefined);
    expect(parsed.request.prompt.startsWith("system: You may call one or more functions")).to.equal(true);
    expect(parsed.request.prompt).to.include('<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>');
    expect(parsed.request.prompt).to.include("tool: <tool_response>\nsunny\n</tool_response>");
    expect(parsed.request.constraint).to.deep.include({ type: "tagged_json", begin: "<tool_call>\n", end: "\n</tool_call>", repeat: true });
    const named = parseChat({ model: "m", messages: history("call_1"), tools: [weather], tool_choice: { type: "function", function: { name: "get_weather" } }, parallel_tool_calls: false }, undefined);
    expect(named.request.constraint).to.deep.include({ type: "tagged_json", repeat: false });
    expect(() => parseChat({ model: "m", messages: history("x"), tools: [weather], tool_choice: { type: "function", function: { name: "nope" } } }, undefined)).to.throw(/not among the tools/);
    const auto = parseChat({ model: "m", messages: history("call_1"), tools: [weather] }, undefined);
    expect(auto.request.constraint).to.equal(undefined);
    expect(auto.tools).to.deep.equal({ format: "hermes" });
    const none = parseChat({ model: "m", messages: history("call_1"), tools: [weather], tool_choice: "none" }, undefined);
    expect(none.tools).to.equal(undefined);
  });

  const OUTPUTS: [ToolFormat, string, { content: string | null; calls: { name: string; arguments: unknown }[] }][] = [
    ["hermes", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome, {IT}"}}\n</tool_call>', { content: "Let me check.", calls: [{ name: "get_weather", arguments: { city: "Paris" } }, { name: "get_weather", arguments: { city: "Rome, {IT}" } }] }],
    ["hermes", "No tools needed: it is sunny.", { content: "No tools needed: it is sunny.", calls: [] }],
    ["hermes", "<tool_call>\nnot json\n</tool_call>", { content: "<tool_call>\nnot json\n</tool_call>", calls: [] }],
    ["llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', { content: null, calls: [{ name: "get_weather", arguments: { city: "Paris" } }] }],
    ["llama3", "{ maybe not a call", { content: "{ maybe not a call", calls: [] }],
    ["mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]', { content: null, calls: [{ name: "get_weather", arguments: { city: "Paris" } }, { name: "get_weather", arguments: { city: "Oslo" } }] }],
  ];

  it("parses whole outputs into tool_calls with ids, arguments as JSON text", () => {
    for (const [format, text, expected] of OUTPUTS) {
      const parsed = parseToolCalls(text, format);
      expect(parsed.content, text).to.equal(expected.content);
      expect(parsed.toolCalls.map((call) => ({ name: call.function.name, arguments: JSON.parse(call.function.arguments) as unknown }))).to.deep.equal(expected.calls);
      for (const call of parsed.toolCalls) {
        expect(call.type).to.equal("function");
        expect(call.id).to.match(format === "mistral" ? /^[A-Za-z0-9]{9}$/ : /^call_/);
      }
    }
  });

  it("streams the same calls whatever the split: name first, then arguments in pieces", () => {
    for (const [format, text, expected] of OUTPUTS) {
      for (const size of [1, 2, 3, 7, 1000]) {
        const parser = new ToolCallStreamParser(format);
        const pieces: StreamPiece[] = [];
        for (let at = 0; at < text.length; at += size) pieces.push(...parser.push(text.slice(at, at + size)));
        pieces.push(...parser.finish());
        const got = collect(pieces);
        expect(got.calls.map((call) => ({ name: call.name, arguments: JSON.parse(call.arguments) as unknown })), `${text} / ${size}`).to.deep.equal(expected.calls);
        expect(got.content.trim(), `${text} / ${size}`).to.equal(expected.content ?? "");
        expect(parser.toolCalls).to.equal(expected.calls.length);
        // Arguments come after their call's first delta, and in more than one piece when the text arrives in small pieces.
        if (format === "hermes" && expected.calls.length > 0 && size === 1) {
          expect(pieces.filter((p) => p.kind === "tool_call" && p.index === 0 && p.id === undefined).length).to.be.greaterThan(1);
        }
      }
    }
  });
});
