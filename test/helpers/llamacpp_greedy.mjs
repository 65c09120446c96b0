/**
 * Greedy continuations and tokenizations of GGUF models through llama.cpp (the npm package
 * node-llama-cpp, its prebuilt CPU binaries; nothing is built or downloaded), to check
 * export_gguf.py against the project's reference on the same weights.
 *
 *   node test/helpers/llamacpp_greedy.mjs JOBS.json
 *
 * JOBS.json: [{"gguf": path, "prompts": [[ids...]...], "maxNewTokens": n, "texts": [str...]}]
 * Prints one JSON array: per job {"outputs": [[ids...]...], "ended": [id|null...], "tokens": [[ids...]...]},
 * where outputs stop before the first end-of-generation token, ended holds that token per prompt
 * (null where none came within maxNewTokens; where llama.cpp stopped without naming it, the model's EOS) and tokens are llama.cpp's tokenization of each text
 * (no BOS added, special tokens not parsed).
 */
import { readFileSync } from "node:fs";
import { getLlama } from "node-llama-cpp";

const jobs = JSON.parse(readFileSync(process.argv[2], "utf8"));
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const results = [];
for (const job of jobs) {
  const model = await llama.loadModel({ modelPath: job.gguf });
  const outputs = [];
  const ended = [];
  for (const prompt of job.prompts) {
    // A fresh context per prompt: nothing of an earlier prompt stays in the cache.
    const context = await model.createContext({ contextSize: Math.max(64, prompt.length + job.maxNewTokens + 8), threads: 1 });
    const sequence = context.getSequence();
    const out = [];
    let end = null;
    if (job.maxNewTokens > 0) {
      for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
        if (model.isEogToken(token)) {
          end = token;
          break;
        }
        out.push(token);
        if (out.length >= job.maxNewTokens) break;
      }
    }
    // evaluate() ends by itself at an end-of-generation token without yielding it; the model's
    // EOS is then the one (these fixtures have no other).
    if (end === null && out.length < job.maxNewTokens) end = model.tokens.eos ?? null;
    outputs.push(out);
    ended.push(end);
    await context.dispose();
  }
  const tokens = (job.texts ?? []).map((text) => Array.from(model.tokenize(text, false)));
  results.push({ outputs, ended, tokens });
  await model.dispose();
}
await llama.dispose();
console.log(JSON.stringify(results));
