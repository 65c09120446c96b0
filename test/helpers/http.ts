/** Real HTTP over a real loopback socket. */
import type { AddressInfo } from "node:net";
import type { Server } from "node:http";
import type { ServingApp } from "../../src/types.js";

export interface Running {
  readonly base: string;
  readonly server: Server;
  close(): Promise<void>;
}

export async function listen(app: ServingApp): Promise<Running> {
  const server = app.listen(0, "127.0.0.1");
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", reject);
  });
  const { port } = server.address() as AddressInfo;
  return {
    base: `http://127.0.0.1:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A started app on a socket; close() stops the app too. */
export async function serve(app: ServingApp, options: { start?: boolean } = {}): Promise<Running> {
  if (options.start ?? true) await app.start();
  const running = await listen(app);
  return {
    ...running,
    close: async () => {
      await app.stop();
      await running.close();
    },
  };
}

export function postJson(base: string, path: string, body: unknown, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  if (!headers.has("content-type")) headers.set("content-type", "application/json");
  return fetch(base + path, {
    ...init,
    method: "POST",
    headers,
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

export interface ValidationBody {
  detail: { loc: (string | number)[]; msg: string; type: string }[];
  code: string;
}

/** Reads from a stream until `predicate` holds for the text so far. */
export async function readUntil(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  predicate: (text: string) => boolean,
): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  while (!predicate(text)) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`stream ended before the expected text; got ${JSON.stringify(text)}`);
    text += decoder.decode(value, { stream: true });
  }
  return text;
}
