/** Small HTTP helpers: one-off requests, Prometheus scrapes, free ports. */
import { request as httpRequest, type Agent } from "node:http";
import { createServer } from "node:net";

export interface Reply {
  status: number;
  body: string;
}

export function send(
  url: string,
  options: { method?: string; body?: string; agent?: Agent; timeoutMs?: number; headers?: Record<string, string> } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { ...options.headers };
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      headers["content-length"] = Buffer.byteLength(options.body);
    }
    const req = httpRequest(url, { method: options.method ?? "GET", headers, agent: options.agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      res.on("error", reject);
    });
    req.setTimeout(options.timeoutMs ?? 30_000, () => req.destroy(new Error(`timeout after ${options.timeoutMs ?? 30_000} ms: ${url}`)));
    req.on("error", reject);
    req.end(options.body);
  });
}

/** Prometheus text exposition -> `name{labels}` (as written) -> value. */
export async function scrape(baseUrl: string): Promise<Map<string, number>> {
  const reply = await send(`${baseUrl}/metrics`);
  if (reply.status !== 200) throw new Error(`${baseUrl}/metrics answered ${reply.status}`);
  const values = new Map<string, number>();
  for (const line of reply.body.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const space = line.lastIndexOf(" ");
    values.set(line.slice(0, space), Number(line.slice(space + 1)));
  }
  return values;
}

/** A port free right now on 127.0.0.1 (for servers that cannot report the one they bound). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
