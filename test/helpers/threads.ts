/** This process's thread count, for leak checks of native work. */
import { readFileSync } from "node:fs";

export const threads = (): number => Number(/^Threads:\s+(\d+)/m.exec(readFileSync("/proc/self/status", "utf8"))?.[1]);

/**
 * The thread count once it has held still for 200 ms: the OpenMP pool of a disposed model's
 * inference thread winds down after that thread has been joined, so a count read at once can
 * still include threads on their way out.
 */
export async function settledThreads(): Promise<number> {
  let value = threads();
  for (let stableSince = Date.now(), end = Date.now() + 5000; Date.now() - stableSince < 200 && Date.now() < end; ) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    const now = threads();
    if (now !== value) [value, stableSince] = [now, Date.now()];
  }
  return value;
}
