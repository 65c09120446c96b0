/** node:http requests from a chosen loopback address: each "client" of the proxy tests is its own address. */
import { request } from "node:http";

export interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The body as the socket delivered it, one entry per read. */
  reads: string[];
}

export function send(
  port: number,
  path: string,
  options: { method?: string; body?: unknown; from?: string; headers?: Record<string, string> } = {},
): Promise<Answer> {
  const body = options.body === undefined ? undefined : JSON.stringify(options.body);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: "127.0.0.1",
        port,
        path,
        method: options.method ?? (body ? "POST" : "GET"),
        localAddress: options.from,
        agent: false,
        headers: { ...(body ? { "content-type": "application/json" } : {}), ...options.headers },
      },
      (res) => {
        const reads: string[] = [];
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => reads.push(chunk));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: reads.join(""), reads }));
        res.on("error", reject);
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}
