/**
 * An exported checkpoint that carries a chat template, served by `npm start` and driven by
 * the official client: scripts/model/export_gpt.py --tokenizer-config embeds a
 * tokenizer_config.json whose ChatML template the chat route renders (its usage counts the
 * rendered prompt's bytes: the byte-level model sees exactly that text).
 */
import { expect } from "chai";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";

import { repoRoot } from "../helpers/fixtures.js";
import { ServerProcess } from "./serverProcess.js";

const CHATML =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** A small random trainer checkpoint (python/torchserve_node/gpt.py), as train_gpt.py saves them. */
const MAKE_SOURCE = `
import sys, torch
sys.path.insert(0, "python")
from torchserve_node.gpt import GPT, GPTConfig
torch.manual_seed(0)
cfg = GPTConfig(vocab_size=259, block_size=64, n_layer=1, n_head=2, n_embd=32)
torch.save({"config": cfg.to_dict(), "model": GPT(cfg).state_dict()}, sys.argv[1])
`;

describe("an exported checkpoint with a chat template (npm start, official client)", function () {
  this.timeout(180000);
  let dir: string;
  let server: ServerProcess | undefined;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), "tsn-chat-"));
  });
  after(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("renders the checkpoint's template for chat, streamed and not", async () => {
    const python = (args: string[]) => {
      const result = spawnSync("/usr/bin/python3", args, { cwd: repoRoot, encoding: "utf8", env: { ...process.env, OMP_WAIT_POLICY: "PASSIVE" } });
      expect(result.status, `${result.stdout}\n${result.stderr}`).to.equal(0);
    };
    const source = join(dir, "source.pt");
    const checkpoint = join(dir, "chat-model.pt");
    const tokenizerConfig = join(dir, "tokenizer_config.json");
    writeFileSync(tokenizerConfig, JSON.stringify({ chat_template: CHATML, eos_token: "<|im_end|>" }));
    python(["-c", MAKE_SOURCE, source]);
    python(["scripts/model/export_gpt.py", source, checkpoint, "--tokenizer-config", tokenizerConfig]);

    server = new ServerProcess({ SERVICE_CKPT: checkpoint });
    const base = (await server.ready()).text;
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).to.deep.equal(["chat-model"]);

    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi" },
    ];
    const rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    const done = await client.chat.completions.create({ model: "chat-model", messages, max_tokens: 8, temperature: 0 });
    expect(done.usage!.prompt_tokens).to.equal(Buffer.byteLength(rendered));
    // The same text through /v1/completions with the rendered prompt: the template is all the chat route adds.
    const plain = await client.completions.create({ model: "chat-model", prompt: rendered, max_tokens: 8, temperature: 0 });
    expect(done.choices[0]!.message.content).to.equal(plain.choices[0]!.text);

    const stream = await client.chat.completions.create({ model: "chat-model", messages, max_tokens: 8, temperature: 0, stream: true });
    let streamed = "";
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? "";
    expect(streamed).to.equal(done.choices[0]!.message.content);
  });
});
