/**
 * Loads XGrammar's WebAssembly build (@mlc-ai/web-xgrammar). Its lib/index.js is a UMD bundle
 * that uses `require`, `__filename` and a dynamic `import()`, yet sits in a `"type": "module"`
 * package, so neither `import` nor `require` load it as it is: it is compiled here as the
 * CommonJS module it is written as (Module#_compile keeps Node's own dynamic-import loader).
 */
import { readFileSync } from "node:fs";
import Module, { createRequire } from "node:module";
import { dirname } from "node:path";

import type * as XGrammar from "@mlc-ai/web-xgrammar";

export type XGrammarModule = typeof XGrammar;

let loaded: XGrammarModule | undefined;

/** The library, loaded once. */
export function xgrammar(): XGrammarModule {
  if (loaded) return loaded;
  const require = createRequire(import.meta.url);
  const file = require.resolve("@mlc-ai/web-xgrammar/lib/index.js");
  type Compilable = InstanceType<typeof Module> & { _compile(source: string, filename: string): void };
  const module = new Module(file) as Compilable;
  module.filename = file;
  module.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(dirname(file));
  module._compile(readFileSync(file, "utf8"), file);
  loaded = module.exports as XGrammarModule;
  return loaded;
}

/**
 * Runs an XGrammar call that may abort (a schema it does not support, a grammar that does not
 * parse). The WebAssembly build reports the reason only on stderr ("[FATAL] file:line: why")
 * and throws a bare "Aborted()": the reason is caught from there and thrown as the message.
 */
export async function withXGrammarErrors<T>(run: () => Promise<T>): Promise<T> {
  // The bundle binds console.error at load, so its writes are caught where they land; other
  // writes in the meantime pass through.
  const lines: string[] = [];
  const stderr = process.stderr;
  const write = stderr.write;
  stderr.write = function (this: typeof stderr, chunk: unknown, ...rest: unknown[]): boolean {
    const text = typeof chunk === "string" ? chunk : Buffer.isBuffer(chunk) ? chunk.toString("utf8") : "";
    if (text.includes("[FATAL]") || text.startsWith("Aborted(")) {
      lines.push(text);
      return true;
    }
    return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
  } as typeof stderr.write;
  try {
    return await run();
  } catch (err) {
    const fatal = lines.find((line) => line.includes("[FATAL]"));
    const reason = fatal ? fatal.replace(/^.*\[FATAL\]\s*\S+:\d+:\s*/, "").trim() : ((err as Error)?.message ?? String(err));
    throw new Error(reason);
  } finally {
    stderr.write = write;
  }
}
