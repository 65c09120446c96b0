/**
 * The playground pages in a real headless browser (Debian's /usr/bin/chromium driven by
 * playwright-core): what a person sees when they type, generate, stop, or hit an error.
 * Hand-written engines pace the stream where order and timing must be known; the real
 * TorchEngine (tiny fixture: its text is random bytes, so only structure is checked) and the
 * real demo recommender show the pages work against the real models.
 * Screenshots land in .cache/screenshots/ (git-ignored) for a person to look at.
 */
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { expect } from "chai";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { TorchEngine } from "../../src/engine/TorchEngine.js";
import { createApp, createRecsysApp } from "../../src/http/index.js";
import { TorchRecommender } from "../../src/recsys/TorchRecommender.js";
import type { GenerateRequest, ServingApp, TextGenerationEngine } from "../../src/types.js";
import { aborted, deferred, type Deferred } from "../helpers/deferred.js";
import { StreamEngine } from "../helpers/engines.js";
import { fixture, repoRoot } from "../helpers/fixtures.js";
import { listen, serve, type Running } from "../helpers/http.js";
import { RecordingLimiter } from "../helpers/limiters.js";
import { scrape, valueOf } from "../helpers/metrics.js";

const CHROMIUM = "/usr/bin/chromium";
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const SCREENSHOTS = join(repoRoot, ".cache", "screenshots");
const DESKTOP = { width: 1024, height: 860 };
const PHONE = { width: 390, height: 844 };

let browser: Browser;
const toClose: Running[] = [];
let context: BrowserContext | undefined;
/** Uncaught exceptions and CSP violations in the page: any of them fails the test. */
let pageProblems: string[] = [];

describe("playground in a headless browser", function () {
  before(async function () {
    if (!existsSync(CHROMIUM)) {
      throw new Error(`${CHROMIUM} is missing: the playground is tested in a real headless browser. Run \`bash scripts/setup.sh --test\` (it installs the Debian package chromium).`);
    }
    browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
    mkdirSync(SCREENSHOTS, { recursive: true });
  });

  after(async () => {
    await browser?.close();
  });

  afterEach(async () => {
    await context?.close();
    context = undefined;
    for (const running of toClose.splice(0)) await running.close();
    const problems = pageProblems;
    pageProblems = [];
    expect(problems, "errors in the page").to.deep.equal([]);
  });

  async function open(base: string, viewport = DESKTOP, path = "/", colorScheme: "light" | "dark" = "light"): Promise<Page> {
    context = await browser.newContext({ viewport, colorScheme });
    context.setDefaultTimeout(15000);
    const page = await context.newPage();
    page.on("pageerror", (err) => pageProblems.push(`pageerror: ${err.message}`));
    page.on("console", (message) => {
      // A 4xx answer the page asked for is logged by Chromium as a failed load: expected here.
      if (message.type() === "error" && !message.text().startsWith("Failed to load resource")) {
        pageProblems.push(`console: ${message.text()}`);
      }
    });
    const response = await page.goto(base + path);
    expect(response?.status()).to.equal(200);
    return page;
  }

  async function started(app: ServingApp, options: { start?: boolean } = {}): Promise<string> {
    const running = await serve(app, options);
    toClose.push(running);
    return running.base;
  }

  const text = (page: Page, selector: string): Promise<string> => page.locator(selector).innerText();

  /** The DOM, as far as these predicates need it (the tests compile without the DOM library). */
  type Dom = { document: { querySelector(selector: string): { textContent: string | null; dataset: Record<string, string> } | null } };

  async function waitForText(page: Page, selector: string, expected: string): Promise<void> {
    // A function, not a string: the page's CSP forbids eval, which a string predicate needs.
    await page.waitForFunction(
      ([sel, want]) => (globalThis as unknown as Dom).document.querySelector(sel)?.textContent === want,
      [selector, expected] as const,
    );
  }

  const waitForState = (page: Page, state: string) => page.locator(`#status[data-state="${state}"]`).waitFor();

  async function screenshot(page: Page, name: string): Promise<void> {
    await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
  }

  async function fillParameters(page: Page, values: { prompt?: string; maxNewTokens?: string; temperature?: string; topK?: string; seed?: string }) {
    if (values.prompt !== undefined) await page.getByLabel("Prompt", { exact: true }).fill(values.prompt);
    if (values.maxNewTokens !== undefined) await page.getByLabel("Max new tokens").fill(values.maxNewTokens);
    if (values.temperature !== undefined) await page.getByLabel("Temperature", { exact: true }).fill(values.temperature);
    if (values.topK !== undefined) await page.getByLabel("Top k").fill(values.topK);
    if (values.seed !== undefined) await page.getByLabel("Seed").fill(values.seed);
  }

  describe("text playground in a browser (hand-written engines)", function () {
    it("streams pieces into the output as they arrive, in order, then shows Done and the stats", async () => {
      const pieces = ["Once", " upon", " a time", " — fin ✓"];
      const gates: Deferred<void>[] = pieces.map(() => deferred());
      const engine = new StreamEngine(async function* () {
        for (const [index, piece] of pieces.entries()) {
          await gates[index]!.promise;
          yield piece;
        }
      });
      const page = await open(await started(createApp(engine)));
      await fillParameters(page, { prompt: "Tell me a story", maxNewTokens: "16", temperature: "0.5", topK: "", seed: "42" });
      await page.getByRole("button", { name: "Generate" }).click();

      // The form's values reach the engine as the API's request (top_k empty: null).
      const call = await engine.calls.next();
      const { signal: _signal, ...request } = call.request;
      expect(request).to.deep.equal({ prompt: "Tell me a story", maxNewTokens: 16, temperature: 0.5, topK: null, seed: 42 });
      expect(await page.getByRole("button", { name: "Generate" }).isDisabled()).to.equal(true);
      expect(await page.getByRole("button", { name: "Stop" }).isEnabled()).to.equal(true);
      expect(await text(page, "#output-prompt")).to.equal("Tell me a story");
      expect(await text(page, "#status")).to.equal("Waiting for the first piece…");

      // Each piece shows up as soon as the engine yields it, after the ones before it.
      for (let index = 0; index < pieces.length; index++) {
        gates[index]!.resolve();
        await waitForText(page, "#continuation", pieces.slice(0, index + 1).join(""));
        expect(await text(page, "#stat-pieces")).to.equal(String(index + 1));
        if (index === 1) {
          expect(await page.locator("#status").getAttribute("data-state")).to.equal("streaming");
          await screenshot(page, "text-streaming-desktop");
        }
      }

      await waitForState(page, "done");
      expect(await text(page, "#status")).to.equal("Done");
      expect(await text(page, "#continuation")).to.equal(pieces.join(""));
      expect(await text(page, "#stat-first")).to.match(/^\d+ ms$|^\d+\.\d\d s$/);
      expect(await text(page, "#stat-total")).to.match(/^\d+ ms$|^\d+\.\d\d s$/);
      expect(await page.getByRole("button", { name: "Generate" }).isEnabled()).to.equal(true);
      expect(await page.getByRole("button", { name: "Stop" }).isDisabled()).to.equal(true);
      expect(await page.locator("#error").isHidden()).to.equal(true);
      expect(JSON.parse(await page.locator("#request-body").textContent() ?? "")).to.deep.equal({
        prompt: "Tell me a story",
        max_new_tokens: 16,
        temperature: 0.5,
        top_k: null,
        seed: 42,
      });
      await screenshot(page, "text-done-desktop");
    });

    it("Stop aborts the request: the server cancels the generation and the page says Stopped", async () => {
      const engine = new StreamEngine(async function* (call) {
        yield "tick";
        await aborted(call.signal!); // a long generation: nothing more until the client leaves
      });
      const base = await started(createApp(engine));
      const page = await open(base);
      await page.getByRole("button", { name: "Generate" }).click();
      await waitForText(page, "#continuation", "tick");
      await page.getByRole("button", { name: "Stop" }).click();

      const call = await engine.calls.next();
      await call.closed.promise; // the server closed the engine's stream
      expect(call.signal!.aborted).to.equal(true);
      await waitForState(page, "stopped");
      expect(await text(page, "#continuation")).to.equal("tick");
      expect(await text(page, "#stat-pieces")).to.equal("1");
      expect(await page.getByRole("button", { name: "Generate" }).isEnabled()).to.equal(true);
      expect(await page.getByRole("button", { name: "Stop" }).isDisabled()).to.equal(true);
      expect(valueOf(await scrape(base), "stream_cancelled_total")).to.equal(1);
    });

    it("Ctrl+Enter in the prompt generates, and the character count follows the prompt in code points", async () => {
      const engine = new StreamEngine(async function* (call) {
        yield `<${call.request.prompt}>`;
      });
      const page = await open(await started(createApp(engine)));
      await page.getByLabel("Prompt", { exact: true }).fill("héllo 🙂");
      expect(await text(page, "#prompt-count")).to.equal("7");
      await page.getByLabel("Prompt", { exact: true }).press("Control+Enter");
      await waitForState(page, "done");
      expect(await text(page, "#continuation")).to.equal("<héllo 🙂>");
    });

    it("shows a 422 answer's violations, field by field, and calls no engine", async () => {
      const engine = new StreamEngine(async function* () {
        yield "never";
      });
      const page = await open(await started(createApp(engine)), PHONE, "/", "dark");
      await fillParameters(page, { maxNewTokens: "600", temperature: "0", topK: "0" });
      await page.getByRole("button", { name: "Generate" }).click();
      await waitForState(page, "error");
      const alert = page.getByRole("alert");
      expect(await alert.locator(".error-title").innerText()).to.equal("422 Invalid request");
      const violations = await alert.locator(".violations li").allInnerTexts();
      expect(violations.map((line) => line.split(":")[0])).to.have.members(["body.max_new_tokens", "body.temperature", "body.top_k"]);
      expect(await alert.innerText()).to.include("ERR_VALIDATION");
      expect(await text(page, "#status")).to.equal("Failed: HTTP 422");
      expect(await text(page, "#continuation")).to.equal("");
      expect(engine.calls.all).to.have.length(0);
      await screenshot(page, "text-422-phone-dark");
    });

    it("shows a 429 with its Retry-After when the rate limiter denies the generation", async () => {
      const limiter = new RecordingLimiter(() => true);
      limiter.retryAfterSeconds = () => 7;
      const engine = new StreamEngine(async function* () {
        yield "never";
      });
      const page = await open(await started(createApp(engine, { rateLimiter: limiter })));
      limiter.decide = () => false; // the page loaded; now the client is over its budget
      await page.getByRole("button", { name: "Generate" }).click();
      await waitForState(page, "error");
      const alert = page.getByRole("alert");
      expect(await alert.locator(".error-title").innerText()).to.equal("429 Rate limited: retry after 7 s");
      expect(await alert.locator(".error-code").innerText()).to.equal("Code: ERR_RATE_LIMITED");
      expect(engine.calls.all).to.have.length(0);
    });

    it("shows a 503 when the app is not serving (before start)", async () => {
      const engine = new StreamEngine(async function* () {
        yield "never";
      });
      const page = await open(await started(createApp(engine), { start: false }));
      await page.getByRole("button", { name: "Generate" }).click();
      await waitForState(page, "error");
      const alert = page.getByRole("alert");
      expect(await alert.locator(".error-title").innerText()).to.equal("503 Not serving right now: retry after 1 s");
      expect(await alert.locator(".error-detail").innerText()).to.match(/not serving/);
      expect(await alert.locator(".error-code").innerText()).to.equal("Code: ERR_NOT_SERVING");
    });

    it("shows an `event: error` that arrives after the stream started, keeping the text so far", async () => {
      const engine = new StreamEngine(async function* () {
        yield "partial";
        throw new Error("the engine broke");
      });
      const page = await open(await started(createApp(engine)));
      await page.getByRole("button", { name: "Generate" }).click();
      await waitForState(page, "error");
      const alert = page.getByRole("alert");
      expect(await alert.locator(".error-title").innerText()).to.equal("The stream failed after it started");
      expect(await alert.locator(".error-detail").innerText()).to.equal("Internal Server Error");
      expect(await alert.locator(".error-code").innerText()).to.equal("Code: ERR_INTERNAL");
      expect(await text(page, "#continuation")).to.equal("partial");
      expect(await page.getByRole("button", { name: "Generate" }).isEnabled()).to.equal(true);
    });
  });

  /** Passes the real engine's pieces through, holding after the first until the client leaves. */
  class HeldAfterFirstPiece implements TextGenerationEngine {
    readonly firstPiece = deferred<AbortSignal>();
    readonly closed = deferred();

    constructor(private readonly real: TextGenerationEngine) {}

    generateBatch(requests: readonly GenerateRequest[]): Promise<string[]> {
      return this.real.generateBatch(requests);
    }

    async *generateStream(request: GenerateRequest, signal?: AbortSignal): AsyncIterable<string> {
      try {
        let first = true;
        for await (const piece of this.real.generateStream(request, signal)) {
          if (signal?.aborted) return;
          yield piece;
          if (first) {
            first = false;
            this.firstPiece.resolve(signal!);
            await aborted(signal!);
          }
        }
      } finally {
        this.closed.resolve();
      }
    }
  }

  describe("text playground in a browser (real TorchEngine, tiny fixture)", function () {
    let engine: TorchEngine;
    before(async () => {
      engine = await TorchEngine.load(fixture("tiny-gpt.pt"), { threads: 1 });
    });
    after(async () => {
      await engine?.dispose();
    });

    it("streams a continuation to Done; the same seed gives the same text again", async () => {
      const page = await open(await started(createApp(engine)), PHONE);
      await fillParameters(page, { prompt: "The jury said", maxNewTokens: "40", temperature: "1", seed: "7" });
      const before = engine.usage().generatedTokens;
      await page.getByRole("button", { name: "Generate" }).click();
      await waitForState(page, "done");
      const first = await page.locator("#continuation").textContent();
      const pieces = Number(await text(page, "#stat-pieces"));
      const generated = engine.usage().generatedTokens - before;
      expect(first).to.have.length.greaterThan(0);
      expect(pieces).to.be.within(1, 40);
      // A piece is whole UTF-8 text: never more pieces than tokens.
      expect(pieces).to.be.at.most(generated);
      expect(await text(page, "#output-prompt")).to.equal("The jury said");
      await screenshot(page, "text-real-engine-phone");

      // Forget the first run's "done", so that only the second run's end can match.
      await page.evaluate(() => {
        (globalThis as unknown as Dom).document.querySelector("#status")!.dataset["state"] = "stale";
      });
      await page.getByRole("button", { name: "Generate" }).click();
      await waitForState(page, "done");
      expect(await page.locator("#continuation").textContent()).to.equal(first);
    });

    it("the Chat tab holds a conversation through /v1/chat/completions, streamed, and replies as the API does", async () => {
      const base = await started(createApp(engine, { modelName: "tiny" }));
      const page = await open(base);
      await page.getByRole("tab", { name: "Chat" }).click();
      expect(await page.locator("#panel-generate").isHidden()).to.equal(true);
      await page.getByLabel("Message").fill("Hello there");
      await page.getByLabel("Chat temperature").fill("0");
      await page.getByLabel("Chat max tokens").fill("12");
      await page.getByLabel("Stop sequence").fill("");
      await page.getByRole("button", { name: "Send" }).click();
      await page.locator('#chat-status[data-state="done"]').waitFor();
      const messages = page.locator("#chat-log .message");
      expect(await messages.count()).to.equal(2);
      expect(await page.locator("#chat-log .message.user .content").innerText()).to.equal("Hello there");
      const reply = await page.locator("#chat-log .message.assistant .content").textContent();
      // The same request through the API, not streamed: the same greedy reply.
      const direct = (await (
        await fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "tiny", messages: [{ role: "user", content: "Hello there" }], temperature: 0, max_tokens: 12 }),
        })
      ).json()) as { choices: { message: { content: string } }[] };
      expect(reply).to.equal(direct.choices[0]!.message.content);

      // A second turn carries the history; New chat clears it.
      await page.getByLabel("Message").fill("And then?");
      await page.evaluate(() => {
        (globalThis as unknown as Dom).document.querySelector("#chat-status")!.dataset["state"] = "stale";
      });
      await page.getByRole("button", { name: "Send" }).click();
      await page.locator('#chat-status[data-state="done"]').waitFor();
      expect(await messages.count()).to.equal(4);
      await screenshot(page, "text-chat-real-engine");
      await page.getByRole("button", { name: "New chat" }).click();
      expect(await messages.count()).to.equal(0);
    });

    it("the Chat tab sends a JSON Schema (the reply validates) and tools (the reply shows the call)", async () => {
      const base = await started(createApp(engine, { modelName: "tiny" }));
      const page = await open(base);
      await page.getByRole("tab", { name: "Chat" }).click();
      await page.getByLabel("Message").fill("A person");
      await page.getByLabel("Chat max tokens").fill("200");
      await page.getByLabel("Stop sequence").fill("");
      const schema = { type: "object", properties: { name: { type: "string", maxLength: 8 }, age: { type: "integer" } }, required: ["name", "age"], additionalProperties: false };
      await page.getByLabel("JSON Schema").fill(JSON.stringify(schema));
      await page.getByRole("button", { name: "Send" }).click();
      await page.locator('#chat-status[data-state="done"]').waitFor();
      const reply = JSON.parse((await page.locator("#chat-log .message.assistant .content").textContent())!) as Record<string, unknown>;
      expect(Object.keys(reply)).to.deep.equal(["name", "age"]);
      expect(reply["age"]).to.be.a("number");

      await page.getByRole("button", { name: "New chat" }).click();
      await page.getByLabel("JSON Schema").fill("");
      const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string", maxLength: 10 } }, required: ["city"], additionalProperties: false } } }];
      await page.getByLabel("Tools").fill(JSON.stringify(tools));
      await page.getByLabel("Tool choice").selectOption("required");
      await page.getByLabel("Message").fill("Weather?");
      await page.getByRole("button", { name: "Send" }).click();
      await page.locator('#chat-status[data-state="done"]').waitFor();
      const shown = (await page.locator("#chat-log .message.assistant .content").textContent())!;
      const call = /^→ get_weather\((.*)\)$/m.exec(shown);
      expect(call, shown).to.not.equal(null);
      expect(JSON.parse(call![1]!)).to.have.property("city").that.is.a("string");
      await screenshot(page, "text-chat-tool-call");
    });

    it("Stop ends a long generation: the request is aborted and the text stops growing", async () => {
      const held = new HeldAfterFirstPiece(engine);
      const base = await started(createApp(held));
      const page = await open(base);
      // Seeded: the fixture's random weights sample end-of-sequence first in about 3% of
      // unseeded runs (no piece at all, and this test would wait for one for ever); seed 2
      // gives a long continuation (418 pieces).
      await fillParameters(page, { prompt: "Once", maxNewTokens: "512", seed: "2" });
      await page.getByRole("button", { name: "Generate" }).click();
      const signal = await held.firstPiece.promise;
      await waitForText(page, "#stat-pieces", "1");
      const shown = await page.locator("#continuation").textContent();
      await page.getByRole("button", { name: "Stop" }).click();
      await held.closed.promise;
      expect(signal.aborted).to.equal(true);
      await waitForState(page, "stopped");
      expect(await page.locator("#continuation").textContent()).to.equal(shown);
      expect(valueOf(await scrape(base), "stream_cancelled_total")).to.equal(1);
    });
  });

  describe("recommendations playground in a browser (real demo recommender)", function () {
    let recommender: TorchRecommender;
    before(async () => {
      // No latency budget: on a busy machine a slow answer would turn into a fallback by design.
      recommender = await TorchRecommender.load(join(repoRoot, "models", "recsys-demo.pt"), { latencyBudgetMs: null });
    });
    after(async () => {
      await recommender?.dispose();
    });

    async function ask(page: Page, userId: string, k: string): Promise<void> {
      await page.getByLabel("User id").fill(userId);
      await page.getByLabel("How many (k)").fill(k);
      await page.getByRole("button", { name: "Recommend" }).click();
    }

    /** The table's rows as [rank, movie id] texts. */
    async function rows(page: Page): Promise<string[][]> {
      return (await table(page, "#items")).map((row) => row.slice(0, 2));
    }

    /** A table's body rows as cell texts. */
    async function table(page: Page, selector: string): Promise<string[][]> {
      const body = page.locator(`${selector} tbody tr`);
      const out: string[][] = [];
      for (let i = 0; i < (await body.count()); i++) out.push(await body.nth(i).locator("td").allInnerTexts());
      return out;
    }

    it("shows a known user's movies with their ranks, not a fallback, and the latency", async () => {
      const base = (await listenRecsys(recommender)).base;
      const page = await open(base);
      await ask(page, "1", "5");
      await waitForState(page, "done");
      const expected = await recommender.recommend(1, 5);
      expect(expected.fallback).to.equal(false);
      expect(await rows(page)).to.deep.equal(expected.items.map((item, index) => [String(index + 1), String(item)]));
      expect(await text(page, "#summary")).to.equal("User 1: personalised recommendations, best first.");
      expect(await text(page, "#stat-source")).to.equal("Model");
      expect(await text(page, "#stat-count")).to.equal("5");
      expect(await text(page, "#stat-latency")).to.match(/^(\d+ ms|\d+\.\d\d s) \(round trip\)$/);
      expect(new URL(page.url()).search).to.equal("?user=1&k=5");
      // Titles and genres from the checkpoint's catalogue (the demo data has a movies.csv).
      const movies = recommender.movies(expected.items);
      expect(movies.every((movie) => movie.title !== null)).to.equal(true);
      expect((await table(page, "#items")).map((row) => row.slice(2))).to.deep.equal(
        movies.map((movie) => [movie.title, movie.genres.join(", ")]),
      );
      // The user's most recent ratings, newest first, with their titles.
      const history = await recommender.history(1, 10);
      expect(history.ratings.length).to.be.greaterThan(0);
      const shown = await table(page, "#history");
      expect(shown.map((row) => row[2])).to.deep.equal(recommender.movies(history.ratings.map((r) => r.movieId)).map((m) => m.title));
      expect(shown.map((row) => row[1])).to.deep.equal(history.ratings.map((r) => `${r.rating}★`));
      expect(shown[0]![0]).to.equal(new Date(history.ratings[0]!.timestamp * 1000).toISOString().slice(0, 10));
      expect(await text(page, "#history-summary")).to.equal(`The ${history.ratings.length} most recent ratings of user 1, newest first.`);
      await screenshot(page, "recsys-known-desktop");
    });

    it("marks an unknown user's most-popular list as a fallback", async () => {
      const page = await open((await listenRecsys(recommender)).base, PHONE);
      await ask(page, "999999", "3");
      await waitForState(page, "done");
      const expected = await recommender.recommend(999999, 3);
      expect(expected.fallback).to.equal(true);
      expect(await rows(page)).to.deep.equal(expected.items.map((item, index) => [String(index + 1), String(item)]));
      expect(await text(page, "#summary")).to.equal("User 999999: fallback (the most popular movies), not personalised.");
      expect(await text(page, "#stat-source")).to.equal("Fallback");
      expect((await table(page, "#items")).map((row) => row[2])).to.deep.equal(recommender.movies(expected.items).map((m) => m.title));
      expect(await table(page, "#history")).to.deep.equal([]);
      expect(await text(page, "#history-summary")).to.equal("User 999999 is not in the model's data: no ratings to show.");
      await screenshot(page, "recsys-fallback-phone");
    });

    it("opens with the request in the address (?user=&k=) already answered", async () => {
      const page = await open((await listenRecsys(recommender)).base, DESKTOP, "/?user=3&k=2");
      await waitForState(page, "done");
      expect(await page.getByLabel("User id").inputValue()).to.equal("3");
      expect((await rows(page)).map((row) => Number(row[1]))).to.deep.equal((await recommender.recommend(3, 2)).items);
    });

    it("shows 422s for a k out of range and a user id that is not an integer", async () => {
      const page = await open((await listenRecsys(recommender)).base);
      await ask(page, "1", "101");
      await waitForState(page, "error");
      const alert = page.getByRole("alert");
      expect(await alert.locator(".error-title").innerText()).to.equal("422 Invalid request");
      expect(await alert.locator(".violations li").allInnerTexts()).to.satisfy((lines: string[]) => lines.some((line) => line.startsWith("query.k:")));
      expect(await page.locator("#result").isHidden()).to.equal(true);
      await screenshot(page, "recsys-422-desktop");

      await ask(page, "abc", "5");
      await waitForState(page, "error");
      expect(await alert.locator(".violations li").allInnerTexts()).to.satisfy((lines: string[]) => lines.some((line) => line.startsWith("path.user_id:")));
    });
  });
});

async function listenRecsys(recommender: TorchRecommender): Promise<Running> {
  const running = await listen(createRecsysApp(recommender));
  toClose.push(running);
  return running;
}
