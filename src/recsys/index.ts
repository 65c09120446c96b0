export {
  RECOMMENDER_FORMAT,
  RECOMMENDER_INTERFACE_VERSION,
  TorchRecommender,
  createRecommenderFromEnv,
  type FallbackReason,
  type RecommenderConfig,
  type RecommenderLogger,
  type RecommenderStats,
  type TorchRecommendation,
  type TorchRecommenderOptions,
} from "./TorchRecommender.js";
