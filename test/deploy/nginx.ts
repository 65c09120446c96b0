/**
 * The committed deploy/nginx/torchserve-node.conf run by the real nginx as a foreground
 * process: its ports rewritten to the test's loopback ports, everything else as shipped.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoRoot } from "../helpers/fixtures.js";
import { freePort } from "../helpers/redis.js";

export const NGINX = "/usr/sbin/nginx";
export const NGINX_SITE = join(repoRoot, "deploy", "nginx", "torchserve-node.conf");

export interface Replica {
  text: number;
  recsys: number;
}

export interface NginxProcess {
  readonly textPort: number;
  readonly recsysPort: number;
  errorLog(): string;
  stop(): Promise<void>;
}

/** Replaces `from` (which must occur) with `to`: a config that drifted fails here, not later. */
export function swap(text: string, from: string, to: string): string {
  if (!text.includes(from)) throw new Error(`${NGINX_SITE} no longer contains ${from}`);
  return text.split(from).join(to);
}

/** `edit`: a change to the shipped site before it runs (a test's variant of it). */
export async function startNginx(replicas: [Replica, Replica], edit: (site: string) => string = (site) => site): Promise<NginxProcess> {
  const dir = mkdtempSync(join(tmpdir(), "torchserve-nginx-"));
  for (const sub of ["body", "proxy", "fastcgi", "uwsgi", "scgi"]) mkdirSync(join(dir, sub));
  const textPort = await freePort();
  const recsysPort = await freePort();
  let site = readFileSync(NGINX_SITE, "utf8");
  site = swap(site, "listen 80;", `listen 127.0.0.1:${textPort};`);
  site = swap(site, "listen 81;", `listen 127.0.0.1:${recsysPort};`);
  site = swap(site, "127.0.0.1:8000", `127.0.0.1:${replicas[0].text}`);
  site = swap(site, "127.0.0.1:8010", `127.0.0.1:${replicas[1].text}`);
  site = swap(site, "127.0.0.1:8001", `127.0.0.1:${replicas[0].recsys}`);
  site = swap(site, "127.0.0.1:8011", `127.0.0.1:${replicas[1].recsys}`);
  writeFileSync(join(dir, "site.conf"), edit(site));
  // What Debian's /etc/nginx/nginx.conf provides around conf.d, pointed at the temp dir.
  writeFileSync(
    join(dir, "nginx.conf"),
    `daemon off;
master_process off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  access_log ${dir}/access.log;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  include ${dir}/site.conf;
}
`,
  );
  const child: ChildProcess = spawn(NGINX, ["-p", dir, "-e", join(dir, "error.log"), "-c", join(dir, "nginx.conf")], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  const killOnExit = (): void => void child.kill("SIGKILL");
  process.once("exit", killOnExit);
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const errorLog = (): string => {
    try {
      return stderr + readFileSync(join(dir, "error.log"), "utf8");
    } catch {
      return stderr;
    }
  };
  // Up once both ports accept connections; an nginx that exits instead fails with its log.
  for (const port of [textPort, recsysPort]) {
    await new Promise<void>((resolve, reject) => {
      const attempt = (): void => {
        if (child.exitCode !== null) return reject(new Error(`nginx exited: ${errorLog()}`));
        const socket = connect(port, "127.0.0.1");
        socket.once("connect", () => {
          socket.destroy();
          resolve();
        });
        socket.once("error", () => setTimeout(attempt, 20));
      };
      attempt();
    });
  }
  return {
    textPort,
    recsysPort,
    errorLog,
    async stop() {
      if (child.exitCode === null) child.kill("SIGQUIT");
      await exited;
      process.off("exit", killOnExit);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
