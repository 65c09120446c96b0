/**
 * Exact numeric bounds and vLLM's regex / choice / grammar constraints against the real server
 * entry with the demo model (which knows no JSON and no regex): across many seeds, whole and
 * streamed, through the `openai` package (extra body fields, as vLLM's clients send them) and
 * the /generate routes, every output validates against its schema (ajv), fully matches its
 * regular expression, is one of its choices, or parses by its grammar.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import { expect } from "chai";
import OpenAI, { APIError } from "openai";

import { postJson } from "../helpers/http.js";
import { serveWithOpenAi } from "./serverProcess.js";

const MODEL = "brown-gpt";
const ajv = new Ajv2020({ strict: false });
const SEEDS = Array.from({ length: 12 }, (_unused, i) => i + 1);

// Bounds of every kind, where XGrammar's own converter is loose (121-129 under maximum 120,
// 1.2 under maximum 1, 3 under exclusiveMaximum 3).
const BOUNDED = {
  $defs: { ratio: { type: "number", minimum: 0, maximum: 1 } },
  type: "object",
  properties: {
    age: { type: "integer", minimum: 0, maximum: 120 },
    delta: { type: "integer", minimum: -15, exclusiveMaximum: -3 },
    score: { $ref: "#/$defs/ratio" },
    temp: { type: "number", exclusiveMinimum: -2.5, exclusiveMaximum: 3 },
    list: { type: "array", items: { type: "integer", exclusiveMinimum: 0, maximum: 19 }, minItems: 1, maxItems: 3 },
    pick: { anyOf: [{ type: "number", minimum: 99.5, maximum: 100.25 }, { type: "null" }] },
  },
  required: ["age", "delta", "score", "temp", "list", "pick"],
  additionalProperties: false,
};

/** Regular expressions whose meaning JavaScript's RegExp shares (no `.`, which XGrammar reads as any byte). */
const REGEXES = ["(cat|dog|bird)-[0-9]{2,4}", "[a-z]{3,8}@[a-z]{2,5}\\.(com|org)", "[A-Z][a-z ,']{1,10}[.!?]", "-?(0|[1-9][0-9]{0,2})(\\.[0-9]{1,2})?"];
const CHOICES = ["positive", "negative", "neutral", 'say "hi"\n', "☃ snow"];
const GRAMMAR = [
  "root ::= greeting \" \" name (\"!\" | \".\")",
  'greeting ::= "hello" | "hi" | "hey"',
  "name ::= [A-Z] [a-z]{1,6} | \"(\" name \" and \" name \")\"",
].join("\n");
/** The grammar above, parsed by hand: a name is a word or a parenthesized pair of names. */
function parsesByGrammar(text: string): boolean {
  const head = /^(hello|hi|hey) /.exec(text);
  if (!head) return false;
  let at = head[0].length;
  const name = (): boolean => {
    const word = /^[A-Z][a-z]{1,6}/.exec(text.slice(at));
    if (word) {
      at += word[0].length;
      return true;
    }
    if (text[at] !== "(") return false;
    at += 1;
    if (!name() || !text.startsWith(" and ", at)) return false;
    at += 5;
    if (!name() || text[at] !== ")") return false;
    at += 1;
    return true;
  };
  return name() && at === text.length - 1 && (text.endsWith("!") || text.endsWith("."));
}

async function streamText(stream: AsyncIterable<OpenAI.Chat.ChatCompletionChunk>): Promise<{ text: string; finish: string | null }> {
  let text = "";
  let finish: string | null = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  return { text, finish };
}

async function generateStream(base: string, body: object): Promise<string> {
  const response = await postJson(base, "/generate/stream", body);
  expect(response.status, await response.clone().text()).to.equal(200);
  const raw = await response.text();
  const data = raw.split("\n").filter((line) => line.startsWith("data: ")).map((line) => line.slice(6));
  expect(data.at(-1)).to.equal("[DONE]");
  return data.slice(0, -1).map((event) => (JSON.parse(event) as { token: string }).token).join("");
}

describe("exact bounds, regex, choice and grammar constraints (npm start, demo model)", function () {
  this.timeout(600000);
  const served = serveWithOpenAi();

  it("bounded integers and numbers: every seed's output validates (n = 4, and streamed)", async () => {
    const validate = ajv.compile(BOUNDED);
    const seen: string[] = [];
    for (const seed of SEEDS) {
      const response_format = { type: "json_schema" as const, json_schema: { name: "bounded", schema: BOUNDED, strict: true } };
      const done = await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Numbers:" }], response_format, max_tokens: 400, seed, n: 4 });
      const stream = await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Numbers:" }], response_format, max_tokens: 400, seed: seed + 100, stream: true });
      const streamed = await streamText(stream);
      for (const [text, finish] of [...done.choices.map((choice) => [choice.message.content!, choice.finish_reason] as const), [streamed.text, streamed.finish] as const]) {
        expect(finish, text).to.equal("stop");
        expect(validate(JSON.parse(text)), `${text}\n${JSON.stringify(validate.errors)}`).to.equal(true);
        seen.push(text);
      }
    }
    expect(seen).to.have.length(SEEDS.length * 5);
    // guided_json (vLLM's form, the schema as JSON text) on /v1/completions: the same guarantee.
    const completions = await served.client.completions.create({ model: MODEL, prompt: "Data:", max_tokens: 400, seed: 7, n: 4, guided_json: JSON.stringify(BOUNDED) } as never);
    for (const choice of (completions as unknown as OpenAI.Completion).choices) {
      expect(choice.finish_reason).to.equal("stop");
      expect(validate(JSON.parse(choice.text)), choice.text).to.equal(true);
    }
  });

  it("guided_regex and structured_outputs.regex: every output fully matches, chat and completions, whole and streamed", async () => {
    for (const pattern of REGEXES) {
      const full = new RegExp(`^(?:${pattern})$`);
      for (const seed of SEEDS.slice(0, 6)) {
        const done = await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Answer:" }], max_tokens: 60, seed, n: 3, guided_regex: pattern } as never);
        for (const choice of (done as unknown as OpenAI.Chat.ChatCompletion).choices) {
          expect(choice.finish_reason, pattern).to.equal("stop");
          expect(choice.message.content, pattern).to.match(full);
        }
        const streamed = await streamText(
          (await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Answer:" }], max_tokens: 60, seed: seed + 50, stream: true, structured_outputs: { regex: pattern } } as never)) as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>,
        );
        expect(streamed.finish, pattern).to.equal("stop");
        expect(streamed.text, pattern).to.match(full);
        const completion = (await served.client.completions.create({ model: MODEL, prompt: "The code is", max_tokens: 60, seed, guided_regex: pattern } as never)) as unknown as OpenAI.Completion;
        expect(completion.choices[0]!.text, pattern).to.match(full);
      }
    }
  });

  it("guided_choice: every output is one of the choices; /generate and /generate/stream take structured_outputs", async () => {
    const outputs = new Set<string>();
    for (const seed of SEEDS) {
      const done = (await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Sentiment?" }], max_tokens: 20, seed, n: 2, temperature: 2, guided_choice: CHOICES } as never)) as unknown as OpenAI.Chat.ChatCompletion;
      for (const choice of done.choices) {
        expect(CHOICES).to.include(choice.message.content);
        expect(choice.finish_reason).to.equal("stop");
        outputs.add(choice.message.content!);
      }
      const streamed = await streamText(
        (await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Sentiment?" }], max_tokens: 20, seed, stream: true, structured_outputs: { choice: CHOICES } } as never)) as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>,
      );
      expect(CHOICES).to.include(streamed.text);
      const generated = (await (await postJson(served.base, "/generate", { prompt: "Mood:", max_new_tokens: 20, seed, structured_outputs: { choice: CHOICES } })).json()) as { text: string };
      expect(CHOICES).to.include(generated.text);
      expect(CHOICES).to.include(await generateStream(served.base, { prompt: "Mood:", max_new_tokens: 20, seed, guided_choice: CHOICES }));
    }
    expect(outputs.size, `more than one choice comes up across seeds: ${[...outputs].join(" | ")}`).to.be.greaterThan(1);
  });

  it("guided_grammar (EBNF, recursive): every output parses, whole and streamed, on every route", async () => {
    for (const seed of SEEDS) {
      const done = (await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Greet:" }], max_tokens: 120, seed, n: 2, guided_grammar: GRAMMAR } as never)) as unknown as OpenAI.Chat.ChatCompletion;
      const texts = done.choices.map((choice) => choice.message.content!);
      texts.push(
        (
          await streamText(
            (await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Greet:" }], max_tokens: 120, seed, stream: true, structured_outputs: { grammar: GRAMMAR } } as never)) as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>,
          )
        ).text,
      );
      texts.push(((await served.client.completions.create({ model: MODEL, prompt: "Greet:", max_tokens: 120, seed, guided_grammar: GRAMMAR } as never)) as unknown as OpenAI.Completion).choices[0]!.text);
      texts.push(((await (await postJson(served.base, "/generate", { prompt: "Greet:", max_new_tokens: 120, seed, guided_grammar: GRAMMAR })).json()) as { text: string }).text);
      texts.push(await generateStream(served.base, { prompt: "Greet:", max_new_tokens: 120, seed, structured_outputs: { grammar: GRAMMAR } }));
      for (const text of texts) expect(parsesByGrammar(text), JSON.stringify(text)).to.equal(true);
    }
  });

  it("bad regexes and grammars, and conflicting fields, are 400s through the client", async () => {
    const cases: [object, RegExp][] = [
      [{ guided_regex: "(ab" }, /regular expression cannot be compiled/],
      [{ guided_grammar: "root ::= missing" }, /grammar cannot be compiled: .*not defined/],
      [{ guided_regex: "a", response_format: { type: "json_object" } }, /guided_regex: cannot be combined with response_format/],
      [{ structured_outputs: { regex: "a", grammar: 'root ::= "a"' } }, /structured_outputs: takes one of/],
    ];
    for (const [fields, reason] of cases) {
      try {
        await served.client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 5, ...fields } as never);
        expect.fail(`accepted ${JSON.stringify(fields)}`);
      } catch (err) {
        expect(err, JSON.stringify(fields)).to.be.instanceOf(APIError);
        expect((err as APIError).status).to.equal(400);
        expect((err as APIError).message).to.match(reason);
      }
    }
  });
});
