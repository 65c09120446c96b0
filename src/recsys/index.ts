export {
  RECOMMENDER_FORMAT,
  RECOMMENDER_INTERFACE_VERSION,
  TorchRecommender,
  type FallbackReason,
  type MovieInfo,
  type RatingEvent,
  type UserHistory,
  type RecommenderConfig,
  type RecommenderLogger,
  type RecommenderStats,
  type TorchRecommendation,
  type TorchRecommenderOptions,
} from "./TorchRecommender.js";
