/**
 * Every constraint of spec §2 on both sides of its boundary, on both generate endpoints,
 * through real HTTP: the status, the reported violation, and what the engine received.
 */
import { expect } from "chai";
import { createApp } from "../../../src/http/index.js";
import type { GenerateRequest, TextGenerationEngine } from "../../../src/types.js";
import { plain } from "../../helpers/engines.js";
import { postJson, serve, type Running, type ValidationBody } from "../../helpers/http.js";

/** Answers both endpoints at once and records what it was asked. */
class RecordingEngine implements TextGenerationEngine {
  readonly received: GenerateRequest[] = [];
  async generateBatch(requests: readonly GenerateRequest[]): Promise<string[]> {
    this.received.push(...requests);
    return requests.map(() => "ok");
  }
  async *generateStream(request: GenerateRequest): AsyncGenerator<string> {
    this.received.push(request);
    yield "ok";
  }
}

const EMOJI = "\u{1F600}"; // one code point, two UTF-16 units

interface Case {
  name: string;
  body: Record<string, unknown>;
  /** Undefined: valid. Otherwise the violation expected at body.<field>. */
  error?: { field: string; type: string };
}

const valid = (name: string, body: Record<string, unknown>): Case => ({ name, body: { prompt: "hi", ...body } });
const bad = (name: string, body: Record<string, unknown>, field: string, type: string): Case => ({
  name,
  body: { prompt: "hi", ...body },
  error: { field, type },
});

const CASES: Case[] = [
  // prompt: 1..2000 code points
  bad("prompt of 0 characters", { prompt: "" }, "prompt", "string_too_short"),
  valid("prompt of 1 character", { prompt: "a" }),
  valid("prompt of 2000 characters", { prompt: "a".repeat(2000) }),
  bad("prompt of 2001 characters", { prompt: "a".repeat(2001) }, "prompt", "string_too_long"),
  valid("prompt of 1 emoji", { prompt: EMOJI }),
  valid("prompt of 2000 emoji (4000 UTF-16 units)", { prompt: EMOJI.repeat(2000) }),
  bad("prompt of 2001 emoji", { prompt: EMOJI.repeat(2001) }, "prompt", "string_too_long"),
  valid("prompt of 1999 letters and 1 emoji", { prompt: "a".repeat(1999) + EMOJI }),
  bad("prompt of 2000 letters and 1 emoji", { prompt: "a".repeat(2000) + EMOJI }, "prompt", "string_too_long"),
  bad("prompt missing", { prompt: undefined }, "prompt", "missing"),
  bad("prompt a number", { prompt: 5 }, "prompt", "string_type"),
  bad("prompt null", { prompt: null }, "prompt", "string_type"),
  // max_new_tokens: integer 1..512
  bad("max_new_tokens 0", { max_new_tokens: 0 }, "max_new_tokens", "greater_than_equal"),
  valid("max_new_tokens 1", { max_new_tokens: 1 }),
  valid("max_new_tokens 512", { max_new_tokens: 512 }),
  bad("max_new_tokens 513", { max_new_tokens: 513 }, "max_new_tokens", "less_than_equal"),
  bad("max_new_tokens -1", { max_new_tokens: -1 }, "max_new_tokens", "greater_than_equal"),
  bad("max_new_tokens \"5\" (no coercion)", { max_new_tokens: "5" }, "max_new_tokens", "int_type"),
  bad("max_new_tokens 5.5", { max_new_tokens: 5.5 }, "max_new_tokens", "int_type"),
  bad("max_new_tokens true", { max_new_tokens: true }, "max_new_tokens", "int_type"),
  bad("max_new_tokens null", { max_new_tokens: null }, "max_new_tokens", "int_type"),
  // temperature: number, > 0 and <= 5
  bad("temperature 0", { temperature: 0 }, "temperature", "greater_than"),
  valid("temperature just above 0 (1e-9)", { temperature: 1e-9 }),
  valid("temperature the smallest double", { temperature: Number.MIN_VALUE }),
  valid("temperature 5", { temperature: 5 }),
  bad("temperature 5.0001", { temperature: 5.0001 }, "temperature", "less_than_equal"),
  bad("temperature -1", { temperature: -1 }, "temperature", "greater_than"),
  bad("temperature \"1.0\"", { temperature: "1.0" }, "temperature", "float_type"),
  bad("temperature true", { temperature: true }, "temperature", "float_type"),
  // top_k: integer >= 1 or null
  bad("top_k 0", { top_k: 0 }, "top_k", "greater_than_equal"),
  valid("top_k 1", { top_k: 1 }),
  valid("top_k null", { top_k: null }),
  valid("top_k absent", {}),
  valid("top_k far above any vocabulary", { top_k: 1_000_000 }),
  bad("top_k \"3\"", { top_k: "3" }, "top_k", "int_type"),
  bad("top_k 2.5", { top_k: 2.5 }, "top_k", "int_type"),
  // seed (extension): integer >= 0
  valid("seed 0", { seed: 0 }),
  bad("seed -1", { seed: -1 }, "seed", "greater_than_equal"),
  bad("seed 1.5", { seed: 1.5 }, "seed", "int_type"),
  bad("seed \"7\"", { seed: "7" }, "seed", "int_type"),
];

for (const path of ["/generate", "/generate/stream"]) {
  describe(`POST ${path} validation`, function () {
    let engine: RecordingEngine;
    let running: Running;

    beforeEach(async () => {
      engine = new RecordingEngine();
      running = await serve(createApp(engine, { maxWaitMs: 1 }));
    });
    afterEach(() => running.close());

    for (const testCase of CASES) {
      const { name, body, error } = testCase;
      it(`${name} -> ${error ? 422 : 200}`, async () => {
        const response = await postJson(running.base, path, body);
        if (!error) {
          expect(response.status, await response.clone().text()).to.equal(200);
          await response.text();
          expect(engine.received).to.have.length(1);
          return;
        }
        expect(response.status).to.equal(422);
        expect(response.headers.get("content-type")).to.match(/^application\/json/);
        const json = (await response.json()) as ValidationBody;
        expect(json.code).to.equal("ERR_VALIDATION");
        expect(json.detail, JSON.stringify(json)).to.have.length(1);
        const [issue] = json.detail;
        expect(issue!.loc).to.deep.equal(["body", error.field]);
        expect(issue!.type).to.equal(error.type);
        expect(issue!.msg).to.be.a("string").that.is.not.empty;
        expect(engine.received).to.have.length(0);
      });
    }

    it("lists every violation at once", async () => {
      const response = await postJson(running.base, path, { prompt: "", max_new_tokens: 0, temperature: 0, top_k: 0 });
      expect(response.status).to.equal(422);
      const json = (await response.json()) as ValidationBody;
      expect(json.detail.map((d) => d.loc)).to.have.deep.members([
        ["body", "prompt"],
        ["body", "max_new_tokens"],
        ["body", "temperature"],
        ["body", "top_k"],
      ]);
      for (const issue of json.detail) expect(issue.msg).to.be.a("string").and.not.empty;
    });

    it("a field with alternatives reports what each alternative needs, not ajv's oneOf bookkeeping or its null branch", async () => {
      const response = await postJson(running.base, path, { prompt: "hi", stop: 5 });
      expect(response.status).to.equal(422);
      const json = (await response.json()) as ValidationBody;
      expect(json.detail.map((d) => [d.loc.join("."), d.type])).to.deep.equal([
        ["body.stop", "string_type"],
        ["body.stop", "list_type"],
      ]);
    });

    it("applies the defaults and passes camelCase fields to the engine", async () => {
      const response = await postJson(running.base, path, { prompt: "hi" });
      expect(response.status).to.equal(200);
      await response.text();
      expect(plain(engine.received[0]!)).to.deep.equal({ prompt: "hi", maxNewTokens: 64, temperature: 1, topK: null });
    });

    it("converts every given field, seed included, and ignores unknown fields", async () => {
      const body = { prompt: "hi", max_new_tokens: 10, temperature: 0.5, top_k: 3, seed: 7, unknown: [1], topK: 9 };
      const response = await postJson(running.base, path, body);
      expect(response.status).to.equal(200);
      await response.text();
      expect(plain(engine.received[0]!)).to.deep.equal({ prompt: "hi", maxNewTokens: 10, temperature: 0.5, topK: 3, seed: 7 });
      expect(engine.received[0]!.signal).to.be.instanceOf(AbortSignal);
    });

    const rawBodies: [string, string, string, string][] = [
      ["malformed JSON", "{\"prompt\": ", "application/json", "json_invalid"],
      ["an array", "[{\"prompt\": \"hi\"}]", "application/json", "dict_type"],
      ["a string", "\"hi\"", "application/json", "dict_type"],
      ["null", "null", "application/json", "dict_type"],
      ["a number", "42", "application/json", "dict_type"],
      ["an empty body", "", "application/json", "missing"],
      ["a text/plain body", "{\"prompt\": \"hi\"}", "text/plain", "content_type"],
      ["a form body", "prompt=hi", "application/x-www-form-urlencoded", "content_type"],
      ["a latin-1 charset", "{\"prompt\": \"hi\"}", "application/json; charset=latin1", "charset_unsupported"],
    ];
    for (const [what, raw, contentType, type] of rawBodies) {
      it(`${what} -> 422 ${type}`, async () => {
        const response = await postJson(running.base, path, raw, { headers: { "content-type": contentType } });
        expect(response.status).to.equal(422);
        const json = (await response.json()) as ValidationBody;
        const issue = json.detail.find((d) => d.type === type);
        expect(issue, JSON.stringify(json)).to.not.equal(undefined);
        expect(issue!.loc[0]).to.equal("body");
        expect(engine.received).to.have.length(0);
      });
    }

    it("a body with no content type -> 422", async () => {
      const response = await fetch(running.base + path, { method: "POST", body: new TextEncoder().encode("{\"prompt\":\"hi\"}") });
      expect(response.status).to.equal(422);
      expect(((await response.json()) as ValidationBody).detail[0]!.type).to.equal("content_type");
    });

    it("accepts application/json with a utf-8 charset", async () => {
      const response = await postJson(running.base, path, { prompt: "hi" }, { headers: { "content-type": "application/json; charset=utf-8" } });
      expect(response.status).to.equal(200);
      await response.text();
    });

    it("a body over 64 KiB -> 413 JSON; the largest valid body fits", async () => {
      const large = await postJson(running.base, path, { prompt: "hi", padding: "x".repeat(64 * 1024) });
      expect(large.status).to.equal(413);
      expect(large.headers.get("content-type")).to.match(/^application\/json/);
      expect(await large.json()).to.deep.include({ code: "ERR_PAYLOAD_TOO_LARGE" });
      // 2,000 astral characters, each written as a 12-byte surrogate-pair escape.
      const escaped = `{"prompt": "${"\\ud83d\\ude00".repeat(2000)}", "max_new_tokens": 512, "temperature": 5, "top_k": 1, "seed": 0}`;
      expect(escaped.length).to.be.above(24_000);
      const largestValid = await postJson(running.base, path, escaped);
      expect(largestValid.status).to.equal(200);
      await largestValid.text();
      expect(engine.received[0]!.prompt).to.equal(EMOJI.repeat(2000));
    });
  });
}
