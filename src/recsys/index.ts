export { RECOMMENDER_FORMAT, RECOMMENDER_INTERFACE_VERSION, type RecommenderConfig } from "./checkpoint.js";
export type { MovieInfo, RatingEvent, UserHistory } from "./catalogue.js";
export {
  TorchRecommender,
  type FallbackReason,
  type RecommenderLogger,
  type RecommenderStats,
  type TorchRecommendation,
  type TorchRecommenderOptions,
} from "./TorchRecommender.js";
