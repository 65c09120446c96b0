/**
 * End to end: the real entry point (`node dist/src/server.js`, what `npm start` runs) as a
 * child process with the committed demo models (SERVICE_CKPT and RECSYS_CKPT unset), asked
 * over real sockets on the ports it reports in its JSON log. Then a graceful drain on
 * SIGTERM, and the startup failures an operator meets first.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { connect } from "node:net";
import { expect } from "chai";
import { DEMO_MODELS } from "../../src/server/start.js";
import { fixture } from "../helpers/fixtures.js";
import { postJson, readUntil } from "../helpers/http.js";
import { eventually, parseExposition, scrape, valueOf } from "../helpers/metrics.js";
import { englishVerdict } from "./english.js";
import { SERVER_ENTRY, ServerProcess, type Exit } from "./serverProcess.js";

const UNKNOWN_USER = 987654321;
const KNOWN_USER = 1;

interface SseEvent {
  event: string;
  data: string;
}

/** Reads a whole event stream: its events in order. */
async function readEvents(response: Response): Promise<SseEvent[]> {
  const text = await response.text();
  expect(text.endsWith("\n\n"), "the stream ends with a blank line").to.equal(true);
  return text
    .slice(0, -2)
    .split("\n\n")
    .map((block) => {
      let event = "message";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data.push(line.slice(6));
        else throw new Error(`unexpected line in the stream: ${JSON.stringify(line)}`);
      }
      return { event, data: data.join("\n") };
    });
}

/** A fresh TCP connection to the app's port (never a pooled one): "connected" or the error code. */
function connectOutcome(base: string): Promise<string> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    socket.once("connect", () => {
      socket.destroy();
      resolve("connected");
    });
    socket.once("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

/** The continuation carried by a stream that ended with [DONE] and no error. */
function streamedText(events: SseEvent[]): string {
  expect(events.length).to.be.greaterThan(1);
  expect(events.at(-1)).to.deep.equal({ event: "message", data: "[DONE]" });
  return events
    .slice(0, -1)
    .map((event) => {
      expect(event.event).to.equal("message");
      const chunk = JSON.parse(event.data) as { token: unknown };
      expect(Object.keys(chunk)).to.deep.equal(["token"]);
      expect(chunk.token).to.be.a("string");
      return chunk.token as string;
    })
    .join("");
}

describe("end to end: node dist/src/server.js", function () {
  before(function () {
    if (!existsSync(SERVER_ENTRY)) throw new Error(`${SERVER_ENTRY} is missing: build first (node node_modules/typescript/bin/tsc -p .)`);
  });

  describe("with the demo models", function () {
    let server: ServerProcess;
    let text: string;
    let recsys: string;

    before(async function () {
      for (const model of [DEMO_MODELS.text, DEMO_MODELS.recsys]) {
        if (!existsSync(model)) throw new Error(`demo model ${model} is missing: it is committed to the repository (models/)`);
      }
      // The recommender answers slow calls with a fallback by design (RECSYS_LATENCY_BUDGET_MS,
      // default 100 ms); a generous budget keeps "a known user is not a fallback" from depending
      // on how busy the test machine is.
      server = new ServerProcess({ RECSYS_LATENCY_BUDGET_MS: "10000" });
      ({ text, recsys } = await server.ready());
    });

    after(async function () {
      const exit = await server?.stop();
      if (exit) expect(exit, server.transcript()).to.deep.equal({ code: 0, signal: null });
    });

    it("logs which demo models it serves and where each app listens", async () => {
      const textLine = await server.waitForLog((line) => line["app"] === "text");
      const recsysLine = await server.waitForLog((line) => line["app"] === "recsys");
      expect(textLine["url"]).to.equal(text);
      expect(recsysLine["url"]).to.equal(recsys);
      expect(server.log.some((line) => line["checkpoint"] === DEMO_MODELS.text && /demo language model/.test(line.msg))).to.equal(true);
      expect(server.log.some((line) => line["checkpoint"] === DEMO_MODELS.recsys && /demo recommender/.test(line.msg))).to.equal(true);
      expect(server.other, "non-JSON output").to.deep.equal([]);
    });

    it("/health answers ok on both apps", async () => {
      for (const base of [text, recsys]) {
        const response = await fetch(`${base}/health`);
        expect(response.status).to.equal(200);
        expect(await response.json()).to.deep.equal({ status: "ok" });
      }
    });

    it("POST /generate continues an English prompt with English-looking text", async () => {
      const response = await postJson(text, "/generate", {
        prompt: "The jury said that the city",
        max_new_tokens: 200,
        temperature: 0.8,
        top_k: 40,
        seed: 1,
      });
      expect(response.status).to.equal(200);
      const body = (await response.json()) as { text: string; latency_ms: number };
      expect(Object.keys(body).sort()).to.deep.equal(["latency_ms", "text"]);
      expect(body.latency_ms).to.be.a("number").and.to.be.greaterThan(0);
      const verdict = englishVerdict(body.text);
      expect(verdict.ok, `not English-looking: ${JSON.stringify(body.text)}\n${verdict.measures.join("\n")}`).to.equal(true);
    });

    it("POST /generate/stream sends data: events with the pieces, then [DONE]", async () => {
      const response = await postJson(text, "/generate/stream", { prompt: "In the morning", max_new_tokens: 48, seed: 3 });
      expect(response.status).to.equal(200);
      expect(response.headers.get("content-type")).to.match(/^text\/event-stream/);
      expect(streamedText(await readEvents(response))).to.have.length.greaterThan(0);
    });

    it("the stream and /generate agree for the same seeded request", async () => {
      const request = { prompt: "He said", max_new_tokens: 32, temperature: 0.7, seed: 11 };
      const batched = (await (await postJson(text, "/generate", request)).json()) as { text: string };
      const streamed = streamedText(await readEvents(await postJson(text, "/generate/stream", request)));
      expect(streamed).to.equal(batched.text);
    });

    it("an invalid body is 422 on both generate routes, listing the violation", async () => {
      for (const path of ["/generate", "/generate/stream"]) {
        const response = await postJson(text, path, { prompt: "", max_new_tokens: 0 });
        expect(response.status, path).to.equal(422);
        const body = (await response.json()) as { detail: { loc: string[] }[]; code: string };
        expect(body.code).to.equal("ERR_VALIDATION");
        expect(body.detail.map((issue) => issue.loc.join("."))).to.have.members(["body.prompt", "body.max_new_tokens"]);
      }
      expect((await postJson(text, "/generate", "{not json")).status).to.equal(422);
    });

    it("GET /recommend/{known user}?k=5 gives 5 personalised items", async () => {
      const response = await fetch(`${recsys}/recommend/${KNOWN_USER}?k=5`);
      expect(response.status).to.equal(200);
      const body = (await response.json()) as { user_id: number; items: number[]; fallback: boolean };
      expect(body.user_id).to.equal(KNOWN_USER);
      expect(body.fallback).to.equal(false);
      expect(body.items).to.have.length(5);
      expect(new Set(body.items).size).to.equal(5);
      for (const item of body.items) expect(Number.isInteger(item)).to.equal(true);
    });

    it("GET /recommend/{unknown user} falls back to popular items; k outside 1..100 is 422", async () => {
      const response = await fetch(`${recsys}/recommend/${UNKNOWN_USER}?k=5`);
      expect(response.status).to.equal(200);
      const body = (await response.json()) as { items: number[]; fallback: boolean };
      expect(body.fallback).to.equal(true);
      expect(body.items).to.have.length(5);
      // The default k is 10.
      expect(((await (await fetch(`${recsys}/recommend/${UNKNOWN_USER}`)).json()) as { items: number[] }).items).to.have.length(10);
      for (const k of ["0", "101", "x"]) {
        expect((await fetch(`${recsys}/recommend/${KNOWN_USER}?k=${k}`)).status, `k=${k}`).to.equal(422);
      }
    });

    it("/metrics of both apps carry the spec's metrics, counting what was asked", async () => {
      await postJson(text, "/generate", { prompt: "Metrics", max_new_tokens: 4, seed: 1 });
      await fetch(`${recsys}/recommend/${UNKNOWN_USER}?k=3`);

      const textResponse = await fetch(`${text}/metrics`);
      expect(textResponse.headers.get("content-type")).to.match(/^text\/plain/);
      const textMetrics = parseExposition(await textResponse.text());
      expect(textMetrics.types.get("http_requests_total")).to.equal("counter");
      expect(textMetrics.types.get("request_latency_seconds")).to.equal("histogram");
      expect(textMetrics.types.get("batch_size")).to.equal("histogram");
      expect(valueOf(textMetrics, "http_requests_total", { route: "/generate", status: "200" })).to.be.at.least(1);
      expect(valueOf(textMetrics, "batch_size_count")).to.be.at.least(1);
      expect(valueOf(textMetrics, "request_latency_seconds_count", { route: "/generate" })).to.be.at.least(1);
      expect(valueOf(textMetrics, "generated_tokens_total")).to.be.greaterThan(0);

      const recsysMetrics = await scrape(recsys);
      expect(recsysMetrics.types.get("recommend_latency_seconds")).to.equal("histogram");
      expect(recsysMetrics.types.get("recommend_fallback_total")).to.equal("counter");
      expect(valueOf(recsysMetrics, "recommend_latency_seconds_count")).to.be.at.least(1);
      expect(valueOf(recsysMetrics, "recommend_fallback_total")).to.be.at.least(1);
      expect(valueOf(recsysMetrics, "http_requests_total", { route: "/recommend/:user_id", status: "200" })).to.be.at.least(1);
    });

    it("serves the playground at / and the API description on both apps", async () => {
      for (const base of [text, recsys]) {
        const page = await fetch(`${base}/`);
        expect(page.status).to.equal(200);
        expect(page.headers.get("content-type")).to.equal("text/html; charset=utf-8");
        expect(await page.text()).to.include("<form");
        const openapi = await fetch(`${base}/openapi.json`);
        expect(openapi.status).to.equal(200);
        expect(((await openapi.json()) as { openapi: string }).openapi).to.equal("3.1.0");
      }
    });
  });

  describe("graceful shutdown", function () {
    it("on SIGTERM finishes the queued and streaming requests, refuses new connections, and exits 0", async () => {
      // A batch waits a minute for company: the request below stays queued until the drain flushes it.
      const server = new ServerProcess({ MAX_WAIT_MS: "60000", MAX_BATCH_SIZE: "8" });
      try {
        const { text } = await server.ready();
        const queued = postJson(text, "/generate", { prompt: "The house was", max_new_tokens: 24, seed: 5 });
        await eventually(async () => valueOf(await scrape(text), "queue_depth") === 1, "the request to be queued");

        const stream = await postJson(text, "/generate/stream", { prompt: "It was", max_new_tokens: 512, seed: 5 });
        expect(stream.status).to.equal(200);
        const reader = stream.body!.getReader();
        const head = await readUntil(reader, (got) => got.includes("\n\n"));

        server.child.kill("SIGTERM");
        await server.waitForLog((line) => /shutting down/.test(line.msg) && line["signal"] === "SIGTERM");
        const answer = await queued;
        expect(answer.status).to.equal(200);
        // Only the drain releases that request, and the listeners close before the drain
        // starts: nobody new gets in while the rest finishes.
        expect(await connectOutcome(text)).to.equal("ECONNREFUSED");
        expect(((await answer.json()) as { text: string }).text).to.have.length.greaterThan(0);
        const done = (got: string) => got.endsWith("data: [DONE]\n\n");
        const whole = done(head) ? head : head + (await readUntil(reader, (rest) => done(head + rest)));
        expect(whole).to.match(/^data: \{"token":/);
        expect(whole).to.not.include("event: error");

        const exit: Exit = await server.exited;
        expect(exit, server.transcript()).to.deep.equal({ code: 0, signal: null });
        expect(server.log.some((line) => line.msg === "stopped")).to.equal(true);
      } finally {
        await server.stop();
      }
    });
  });

  describe("engine variables", function () {
    it("SERVICE_RUNTIME and SERVICE_KERNELS reach the engine, as the startup log shows", async () => {
      const server = new ServerProcess({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_RUNTIME: "torchscript" });
      try {
        const loaded = await server.waitForLog((line) => line.msg.startsWith("language model loaded"));
        expect(loaded["runtime"], server.transcript()).to.equal("torchscript");
        await server.ready();
      } finally {
        await server.stop();
      }
      const capped = new ServerProcess({ SERVICE_CKPT: fixture("tiny-gpt.pt"), SERVICE_KERNELS: "baseline" });
      try {
        const loaded = await capped.waitForLog((line) => line.msg.startsWith("language model loaded"));
        expect(loaded, capped.transcript()).to.deep.include({ runtime: "native", kernels: "baseline" });
      } finally {
        await capped.stop();
      }
    });

    it("an invalid SERVICE_RUNTIME exits 2 naming the variable", async () => {
      const server = new ServerProcess({ SERVICE_RUNTIME: "fast" });
      const exit = await server.exited;
      expect(exit, server.transcript()).to.deep.equal({ code: 2, signal: null });
      expect(server.other.join("\n")).to.include("SERVICE_RUNTIME");
    });
  });

  describe("startup failures", function () {
    it("a SERVICE_CKPT that does not exist: exits non-zero with a log line naming the file", async () => {
      const missing = `/tmp/no-such-dir-${randomBytes(4).toString("hex")}/model.pt`;
      const server = new ServerProcess({ SERVICE_CKPT: missing });
      const exit = await server.exited;
      expect(exit.signal).to.equal(null);
      expect(exit.code, server.transcript()).to.be.a("number").and.to.not.equal(0);
      const fatal = server.log.find((line) => line.level >= 60);
      expect(fatal, server.transcript()).to.not.equal(undefined);
      expect(fatal!.msg).to.include(missing);
      expect(fatal!["code"]).to.equal("ERR_CHECKPOINT_NOT_FOUND");
      expect(server.log.some((line) => line["app"] !== undefined), "no app reported serving").to.equal(false);
    });

    for (const port of ["http", "70000"]) {
      it(`an invalid PORT (${port}): exits 2 with a message naming PORT`, async () => {
        const server = new ServerProcess({ PORT: port });
        const exit = await server.exited;
        expect(exit, server.transcript()).to.deep.equal({ code: 2, signal: null });
        expect(server.other.join("\n")).to.match(/\bPORT must be a port number/).and.to.include(port);
      });
    }
  });
});
