/**
 * Prefix caching through the official `openai` client against the real server entry (demo
 * model), one server with the cache (the default) and one with SERVICE_PREFIX_CACHE=off: a
 * chat's next turn reports the turns before it as `usage.prompt_tokens_details.cached_tokens`
 * (whole and streamed), its text is the uncached server's, and /metrics counts the reuse.
 */
import { expect } from "chai";
import OpenAI from "openai";

import { ServerProcess } from "./serverProcess.js";

const MODEL = "brown-gpt";

describe("prefix caching through the OpenAI API (npm start)", function () {
  this.timeout(180000);
  let cached: { server: ServerProcess; client: OpenAI; base: string };
  let plain: { server: ServerProcess; client: OpenAI; base: string };

  async function start(env: Record<string, string>) {
    const server = new ServerProcess({ LOG_LEVEL: "info", ...env });
    const base = (await server.ready()).text;
    return { server, base, client: new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 }) };
  }

  before(async () => {
    [cached, plain] = await Promise.all([start({}), start({ SERVICE_PREFIX_CACHE: "off" })]);
  });
  after(async () => {
    for (const running of [cached, plain]) {
      const exit = await running?.server.stop();
      expect(exit?.code, running?.server.transcript()).to.equal(0);
    }
  });

  it("a chat's next turn reuses the earlier turns: cached_tokens, whole and streamed, and the uncached text", async () => {
    const system = "You answer questions about the Brown corpus. Keep every answer short and plain. ".repeat(3);
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: system },
      { role: "user", content: "What did the jury say?" },
    ];
    const first = await cached.client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 0 });
    expect(first.usage!.prompt_tokens_details?.cached_tokens).to.equal(0);
    messages.push({ role: "assistant", content: first.choices[0]!.message.content ?? "" });
    messages.push({ role: "user", content: "And then?" });

    const second = await cached.client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 0 });
    const uncached = await plain.client.chat.completions.create({ model: MODEL, messages, max_tokens: 12, temperature: 0 });
    expect(second.choices[0]!.message.content).to.equal(uncached.choices[0]!.message.content);
    expect(uncached.usage!.prompt_tokens_details?.cached_tokens).to.equal(0);
    // The byte-level demo: at least the system prompt and the first question are reused.
    const reused = second.usage!.prompt_tokens_details!.cached_tokens!;
    expect(reused).to.be.at.least(system.length + "What did the jury say?".length);
    expect(reused).to.be.below(second.usage!.prompt_tokens);

    const stream = await cached.client.chat.completions.create({
      model: MODEL, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) text += choice.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).to.equal(uncached.choices[0]!.message.content);
    // The same prompt again: all of it but the last token.
    expect(usage!.prompt_tokens_details!.cached_tokens).to.equal(usage!.prompt_tokens - 1);

    const metrics = await fetch(`${cached.base}/metrics`).then((r) => r.text());
    const value = (name: string) => Number(metrics.match(new RegExp(`^${name} (\\S+)$`, "m"))?.[1]);
    expect(value("prefix_cache_hit_tokens_total")).to.be.at.least(reused + usage!.prompt_tokens - 1);
    expect(value("prefix_cache_queried_tokens_total")).to.be.above(value("prefix_cache_hit_tokens_total"));
    expect(value("prefix_cache_evictions_total")).to.be.at.least(0);
    const off = await fetch(`${plain.base}/metrics`).then((r) => r.text());
    expect(off).to.match(/^prefix_cache_hit_tokens_total 0$/m);
  });

  it("completions report cached_tokens too, and n choices of a cached prompt each share it", async () => {
    const prompt = "The Fulton County Grand Jury said Friday an investigation of recent primary elections ";
    await cached.client.completions.create({ model: MODEL, prompt, max_tokens: 4, temperature: 0 });
    const again = await cached.client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0.8, seed: 3, n: 2 });
    const uncached = await plain.client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0.8, seed: 3, n: 2 });
    expect(again.choices.map((c) => c.text)).to.deep.equal(uncached.choices.map((c) => c.text));
    expect(again.usage!.prompt_tokens_details?.cached_tokens).to.equal(prompt.length - 1);
  });
});
