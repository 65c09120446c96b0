/** Every failure answers JSON: unknown routes, wrong methods, odd engine failures; logged, never a crash. */
import { expect } from "chai";
import { pino } from "pino";
import { createApp, type LoggerLike } from "../../../src/http/index.js";
import type { GenerateRequest, TextGenerationEngine } from "../../../src/types.js";
import { postJson, serve, type Running } from "../../helpers/http.js";

class RecordingLogger implements LoggerLike {
  readonly errors: { obj: object; msg: string | undefined }[] = [];
  info(): void {}
  warn(): void {}
  error(obj: object, msg?: string): void {
    this.errors.push({ obj, msg });
  }
}

describe("errors", function () {
  let running: Running | undefined;
  afterEach(async () => {
    await running?.close();
    running = undefined;
  });

  const echoEngine: TextGenerationEngine = {
    generateBatch: async (requests: readonly GenerateRequest[]) => requests.map((r) => r.prompt),
    generateStream: async function* () {},
  };

  it("unknown routes are 404 JSON", async () => {
    running = await serve(createApp(echoEngine, { maxWaitMs: 1 }));
    for (const [method, path] of [["GET", "/nope"], ["POST", "/generate/other"], ["GET", "/recommend/1"]] as const) {
      const response = await fetch(running.base + path, { method });
      expect(response.status, `${method} ${path}`).to.equal(404);
      expect(response.headers.get("content-type")).to.match(/^application\/json/);
      expect(await response.json()).to.deep.include({ code: "ERR_NOT_FOUND" });
    }
  });

  it("a known path asked with another method is 405 JSON with Allow", async () => {
    running = await serve(createApp(echoEngine, { maxWaitMs: 1 }));
    for (const [method, path, allow] of [
      ["GET", "/generate", "POST"],
      ["PUT", "/generate/stream", "POST"],
      ["DELETE", "/health", "GET, HEAD"],
      ["POST", "/metrics", "GET, HEAD"],
      ["POST", "/openapi.json", "GET, HEAD"],
    ] as const) {
      const response = await fetch(running.base + path, { method });
      expect(response.status, `${method} ${path}`).to.equal(405);
      expect(response.headers.get("allow"), `${method} ${path}`).to.equal(allow);
      expect(response.headers.get("content-type")).to.match(/^application\/json/);
      expect(await response.json()).to.deep.include({ code: "ERR_METHOD_NOT_ALLOWED" });
    }
  });

  it("an engine that throws a non-Error gives 500 JSON, is logged, and the server keeps serving", async () => {
    const logger = new RecordingLogger();
    let calls = 0;
    const engine: TextGenerationEngine = {
      generateBatch: (requests) => {
        calls += 1;
        if (calls === 1) return Promise.reject("a bare string"); // not an Error: the layer must cope
        return Promise.resolve(requests.map(() => "fine"));
      },
      generateStream: async function* () {},
    };
    running = await serve(createApp(engine, { maxWaitMs: 1, logger }));
    const failed = await postJson(running.base, "/generate", { prompt: "x" });
    expect(failed.status).to.equal(500);
    expect(failed.headers.get("content-type")).to.match(/^application\/json/);
    expect(await failed.json()).to.deep.equal({ detail: "Internal Server Error", code: "ERR_INTERNAL" });
    expect(logger.errors).to.have.length(1);
    const ok = await postJson(running.base, "/generate", { prompt: "x" });
    expect(await ok.json()).to.deep.include({ text: "fine" });
  });

  it("/health answers JSON ok in every lifespan state", async () => {
    const app = createApp(echoEngine);
    running = await serve(app, { start: false });
    const health = async () => {
      const response = await fetch(`${running!.base}/health`);
      expect(response.headers.get("content-type")).to.match(/^application\/json/);
      return response.json();
    };
    expect(await health()).to.deep.equal({ status: "ok" });
    await app.start();
    expect(await health()).to.deep.equal({ status: "ok" });
    await app.stop();
    expect(await health()).to.deep.equal({ status: "ok" });
  });

  it("accepts a pino logger", async () => {
    running = await serve(createApp(echoEngine, { maxWaitMs: 1, logger: pino({ level: "silent" }) }));
    expect((await postJson(running.base, "/generate", { prompt: "x" })).status).to.equal(200);
  });
});
