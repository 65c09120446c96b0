/** The recommendation app's metrics. */
import { Counter, Histogram, type Registry } from "prom-client";
import { SHORT_BUCKETS } from "../shell/metrics.js";

export interface RecsysMetrics {
  readonly latency: Histogram;
  readonly fallbacks: Counter;
}

export function createRecsysMetrics(registry: Registry): RecsysMetrics {
  const registers = [registry];
  return {
    latency: new Histogram({
      name: "recommend_latency_seconds",
      help: "Time the recommender took to answer one /recommend request.",
      buckets: SHORT_BUCKETS,
      registers,
    }),
    fallbacks: new Counter({
      name: "recommend_fallback_total",
      help: "Recommendations answered with a fallback result (unknown user, model failure or over budget).",
      registers,
    }),
  };
}
