/**
 * Seeded hostile HTTP requests, sent as raw bytes over a socket (so a body can be invalid
 * UTF-8, truncated or mis-chunked, and a header huge), and what a server must never answer:
 * a 5xx, a hang, or a body that shows a stack trace or a server path. The routes come from
 * each app's route descriptors (fuzzRoutes), so every route is covered, /v1 included. Used by
 * the suite's bounded fuzz test and by scripts/fuzz/http-fuzz.ts for longer runs.
 */
import { connect } from "node:net";
import type { RouteDescriptor } from "../../src/http/shell/routes.js";

/** mulberry32: small, fast and the same on every machine. */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export interface FuzzCase {
  /** What the case is, for a failure message. */
  readonly label: string;
  /** The bytes to send. */
  readonly bytes: Buffer;
  /** Half-close after sending: the request is cut short (truncated body). */
  readonly truncated: boolean;
}

export type App = "text" | "recsys";

const pick = <T>(rand: () => number, items: readonly T[]): T => items[Math.floor(rand() * items.length)]!;

/** One route of an app, as the fuzz addresses it. */
export interface FuzzRoute {
  readonly method: string;
  /** A path for the route: parameters and query drawn from their documented schemas. */
  path(rand: () => number): string;
  /** A valid body (the documented example), for a route that takes one. */
  readonly example: object | undefined;
}

interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  schema: { type?: unknown; minimum?: number; maximum?: number; items?: Parameter["schema"] };
}

/** A value of `schema` as a path or query string: small integers, lists of a few. */
function draw(schema: Parameter["schema"], rand: () => number): string {
  if (schema.type === "array") {
    return Array.from({ length: 1 + Math.floor(rand() * 3) }, () => draw(schema.items ?? {}, rand)).join(",");
  }
  if (schema.type === "integer") {
    const low = Math.max(0, schema.minimum ?? 0);
    const high = Math.min(low + 20, schema.maximum ?? low + 20);
    return String(low + Math.floor(rand() * (high - low + 1)));
  }
  return "x";
}

/** Every route an app registered (its route descriptors), the undocumented ones too. */
export function fuzzRoutes(routes: readonly RouteDescriptor[]): FuzzRoute[] {
  return routes.map((route) => {
    const parameters = (route.doc?.parameters ?? []) as Parameter[];
    const body = (route.doc?.requestBody as { content?: Record<string, { example?: object }> } | undefined)?.content;
    return {
      method: route.method.toUpperCase(),
      example: body?.["application/json"]?.example,
      path(rand) {
        const path = route.path.replace(/:(\w+)/g, (_whole, name: string) => {
          const schema = parameters.find((p) => p.in === "path" && p.name === name)?.schema;
          return schema ? draw(schema, rand) : "1";
        });
        const query = parameters
          .filter((p) => p.in === "query" && (p.required || rand() < 0.5))
          .map((p) => `${p.name}=${draw(p.schema, rand)}`);
        return query.length > 0 ? `${path}?${query.join("&")}` : path;
      },
    };
  });
}

const ODD_PATHS = [
  "/v1", "/v1/", "/v1/models/x", "/v1//completions", "/v1/chat/completions/../../generate", "/v1/completions?stream=true",
  "/generate/", "//generate", "/generate?x=%ZZ", "/%", "/%E0%A4%A", "/recommend/-1", "/recommend/1e3", "/recommend/0x10",
  "/recommend/99999999999999999999999", "/recommend/%00", "/recommend/1?k=-5", "/recommend/1?k=1e309", "/recommend/1?k=2&k=3",
  "/recommend/1?k[]=1", "/recommend/1?__proto__[x]=1", "/recommend/1?constructor[prototype][y]=1", "/../../etc/passwd",
  "/generate/stream/../../x", "/" + "a".repeat(5000), "/metrics?format=%FF", "/openapi.json?%", "/ready?x", "/health/..",
  "/recommend/%F0%9F%98%80", "/recommend/1;k=2", "*",
];

const METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "FOO"];

const CONTENT_TYPES = [
  "application/json", "application/json; charset=utf-8", "application/json; charset=latin1", "application/json; charset=utf-16",
  "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/*", "", "application/json;;;=",
  "application/vnd.api+json", "\u0000",
];

function nested(depth: number, open: string, close: string, inner: string): string {
  return open.repeat(depth) + inner + close.repeat(depth);
}

/** A body for a route: its valid example, or one of many hostile ones. */
function jsonBody(rand: () => number, example: object | undefined): Buffer {
  const valid = example ?? { prompt: "Once upon", max_new_tokens: 1 + Math.floor(rand() * 6), temperature: 0.8, top_k: 5, seed: 1 };
  const choices: (() => Buffer | string)[] = [
    () => JSON.stringify(valid),
    () => "{not json",
    () => '{"prompt": "a", "max_new_tokens": 2',
    () => "",
    () => "null",
    () => "[]",
    () => '"string"',
    () => "1e400",
    () => JSON.stringify({ ...valid, max_new_tokens: 1e308 }),
    () => '{"prompt":"a","max_new_tokens":1e999}',
    () => '{"prompt":"a","max_new_tokens":-0}',
    () => '{"prompt":"a","max_new_tokens":123456789012345678901234567890}',
    () => '{"prompt":"a","seed":9007199254740993}',
    () => '{"prompt":"a","temperature":NaN}',
    () => '{"prompt":"\\ud800","max_new_tokens":1}',
    () => '{"prompt":"\\udfff\\ud800x","max_new_tokens":1}',
    () => Buffer.concat([Buffer.from('{"prompt":"'), Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xe2, 0x82]), Buffer.from('","max_new_tokens":1}')]),
    () => Buffer.from([0xef, 0xbb, 0xbf, ...Buffer.from(JSON.stringify(valid))]),
    () => '{"__proto__":{"polluted":true},"prompt":"a","max_new_tokens":1}',
    () => '{"constructor":{"prototype":{"polluted":true}},"prompt":"a"}',
    () => '{"prompt":"a","prompt":"b","max_new_tokens":1}',
    () => '{"prompt":{"toString":"x"},"max_new_tokens":1}',
    () => '{"prompt":"a","hasOwnProperty":1,"max_new_tokens":1}',
    () => nested(10_000, "[", "]", "1"),
    () => nested(5_000, '{"a":', "}", "1"),
    () => `{"prompt":"${"x".repeat(70 * 1024)}"}`,
    () => `{"prompt":"${"\\u0000".repeat(100)}","max_new_tokens":1}`,
    () => JSON.stringify({ prompt: "a".repeat(4000), max_new_tokens: 1 }),
    () => JSON.stringify({ prompt: "a", max_new_tokens: 1, top_k: 0 }),
    () => JSON.stringify({ prompt: "a", max_new_tokens: 1, top_k: 1e9, temperature: 1e-320 }),
    () => JSON.stringify({ prompt: "", max_new_tokens: 0 }),
    () => JSON.stringify({ prompt: "a", extra: { deep: [1, 2, { x: null }] } }),
    () => Buffer.from(Array.from({ length: 64 }, () => Math.floor(rand() * 256))),
  ];
  const chosen = pick(rand, choices)();
  return typeof chosen === "string" ? Buffer.from(chosen) : chosen;
}

function chunked(body: Buffer, rand: () => number): Buffer {
  const mode = Math.floor(rand() * 4);
  if (mode === 0) return Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from("\r\n0\r\n\r\n")]);
  if (mode === 1) {
    const parts: Buffer[] = [];
    for (let at = 0; at < body.length; at += 3) {
      const piece = body.subarray(at, at + 3);
      parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from("\r\n"));
    }
    return Buffer.concat([...parts, Buffer.from("0\r\n\r\n")]);
  }
  if (mode === 2) return Buffer.concat([Buffer.from("zz\r\n"), body, Buffer.from("\r\n0\r\n\r\n")]);
  return Buffer.concat([Buffer.from(`${(body.length + 100).toString(16)}\r\n`), body]);
}

/** One hostile request to one of `routes`, from `rand`. */
export function fuzzCase(routes: readonly FuzzRoute[], rand: () => number): FuzzCase {
  const route = pick(rand, routes);
  let method = route.method;
  let path = route.path(rand);
  const labels: string[] = [];
  if (rand() < 0.25) {
    path = pick(rand, ODD_PATHS);
    labels.push("odd path");
  }
  if (rand() < 0.15) {
    method = pick(rand, METHODS);
    labels.push("method");
  }
  const headers: string[] = [`Host: 127.0.0.1`, "Connection: close"];
  let body = method === "POST" || rand() < 0.1 ? jsonBody(rand, route.example) : Buffer.alloc(0);
  if (body.length) labels.push(`body ${body.subarray(0, 40).toString("latin1")}`);
  const contentType = rand() < 0.7 ? "application/json" : pick(rand, CONTENT_TYPES);
  if (body.length || rand() < 0.5) headers.push(`Content-Type: ${contentType}`);
  if (contentType !== "application/json") labels.push(`content-type ${JSON.stringify(contentType)}`);
  if (rand() < 0.08) {
    headers.push(`X-Huge: ${"h".repeat(20_000 + Math.floor(rand() * 20_000))}`);
    labels.push("huge header");
  }
  if (rand() < 0.05) {
    for (let i = 0; i < 200; i += 1) headers.push(`X-Many-${i}: ${i}`);
    labels.push("many headers");
  }
  if (rand() < 0.1) {
    headers.push(`X-Request-Id: ${pick(rand, ["\u00ff\u00fe", "a".repeat(500), "ok-id", "<script>", "../../x"])}`);
    labels.push("request id");
  }
  if (rand() < 0.05) {
    headers.push(`Accept: ${pick(rand, ["text/html", "*/*;q=x", "\u00ff"])}`);
  }
  let truncated = false;
  if (body.length && rand() < 0.2) {
    headers.push("Transfer-Encoding: chunked");
    body = chunked(body, rand);
    labels.push("chunked");
  } else if (body.length && rand() < 0.15) {
    headers.push(`Content-Length: ${body.length + 1 + Math.floor(rand() * 50)}`);
    truncated = true;
    labels.push("truncated");
  } else if (body.length && rand() < 0.05) {
    headers.push(`Content-Length: ${Math.max(0, body.length - 3)}`);
    labels.push("short content-length");
  } else if (body.length || method === "POST") {
    headers.push(`Content-Length: ${body.length}`);
  }
  const head = Buffer.from(`${method} ${path} HTTP/1.1\r\n${headers.join("\r\n")}\r\n\r\n`, "latin1");
  return { label: `${method} ${path.slice(0, 60)} ${labels.join(", ")}`, bytes: Buffer.concat([head, body]), truncated };
}

export interface Outcome {
  /** The status of the first response, or null when the server closed without one. */
  status: number | null;
  body: string;
  /** The server neither answered nor closed within the time limit. */
  hung: boolean;
}

/** Sends a case and reads until the server closes (every case says Connection: close). */
export function sendCase(port: number, fuzz: FuzzCase, timeoutMs: number): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = (hung: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const text = Buffer.concat(chunks).toString("latin1");
      const match = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      const split = text.indexOf("\r\n\r\n");
      resolve({ status: match ? Number(match[1]) : null, body: split >= 0 ? text.slice(split + 4) : "", hung });
    };
    const timer = setTimeout(() => finish(true), timeoutMs);
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("close", () => finish(false));
    socket.on("error", () => finish(false));
    socket.on("connect", () => {
      socket.write(fuzz.bytes);
      if (fuzz.truncated) socket.end();
    });
  });
}

/** What no response may show: stack frames, source files, server paths. */
export function leaks(body: string, root: string): string | null {
  if (/\n\s+at [\w.<>]+ \(|\bat (file:|node:)/.test(body)) return "a stack trace";
  if (body.includes(root)) return "the server's directory";
  if (/node_modules|\/src\/[\w/]+\.(ts|js)|\.ts:\d+/.test(body)) return "a source path";
  return null;
}

export interface FuzzRun {
  /** Responses by app and status ("hung", "closed" when none came). */
  statuses: Record<App, Record<string, number>>;
  /** Every 5xx, hang or leak, described. */
  failures: string[];
}

/** An app listening on `port`, and its routes. */
export interface FuzzTarget {
  readonly port: number;
  readonly routes: readonly FuzzRoute[];
}

/** `iterations` seeded cases against both apps, `concurrency` at a time. */
export async function runFuzz(
  targets: Record<App, FuzzTarget>,
  options: { iterations: number; seed: number; concurrency: number; timeoutMs: number; root: string },
): Promise<FuzzRun> {
  const rand = prng(options.seed);
  const run: FuzzRun = { statuses: { text: {}, recsys: {} }, failures: [] };
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < options.iterations) {
      next += 1;
      const app: App = rand() < 0.6 ? "text" : "recsys";
      const fuzz = fuzzCase(targets[app].routes, rand);
      const outcome = await sendCase(targets[app].port, fuzz, options.timeoutMs);
      const key = outcome.hung ? "hung" : String(outcome.status ?? "closed");
      run.statuses[app][key] = (run.statuses[app][key] ?? 0) + 1;
      const leak = leaks(outcome.body, options.root);
      if (outcome.hung || (outcome.status !== null && outcome.status >= 500) || leak) {
        run.failures.push(`${app} ${fuzz.label}: ${key}${leak ? ` (shows ${leak})` : ""} ${outcome.body.slice(0, 200)}`);
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, () => worker()));
  return run;
}
