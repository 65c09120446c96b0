/** Wire schemas of the recommendation app: GET /recommend/{user_id}, /movies and /users/{user_id}/history. */
import { deepFreeze } from "../shell/schemas.js";

export const K_MAX = 100;

/** Path parameters of GET /recommend/{user_id}, after strict integer parsing of the strings. */
export const recommendPathSchema = deepFreeze({
  title: "RecommendPath",
  type: "object",
  required: ["user_id"],
  properties: {
    user_id: {
      type: "integer",
      minimum: Number.MIN_SAFE_INTEGER,
      maximum: Number.MAX_SAFE_INTEGER,
      description: "The user; an optional minus sign and digits.",
    },
  },
});

/** Query parameters of GET /recommend/{user_id}; a repeated parameter is invalid. */
export const recommendQuerySchema = deepFreeze({
  title: "RecommendQuery",
  type: "object",
  properties: {
    k: { type: "integer", minimum: 1, maximum: K_MAX, default: 10, description: "How many items." },
  },
});

export const recommendResponseSchema = deepFreeze({
  title: "RecommendResponse",
  type: "object",
  required: ["user_id", "items", "fallback"],
  properties: {
    user_id: { type: "integer" },
    items: { type: "array", items: { type: "integer" }, description: "Raw movie identifiers, best first." },
    fallback: {
      type: "boolean",
      description: "True for a fallback result (unknown user, or the model failed or missed its budget).",
    },
  },
});

/** Most movie ids one GET /movies asks for, and most ratings one history returns. */
export const MOVIE_IDS_MAX = 100;
export const HISTORY_N_MAX = 100;

/** Query of GET /movies: `ids` is a comma-separated list, split before validation. */
export const moviesQuerySchema = deepFreeze({
  title: "MoviesQuery",
  type: "object",
  required: ["ids"],
  properties: {
    ids: {
      type: "array",
      minItems: 1,
      maxItems: MOVIE_IDS_MAX,
      items: { type: "integer", minimum: Number.MIN_SAFE_INTEGER, maximum: Number.MAX_SAFE_INTEGER },
      description: `Raw movie ids, comma-separated (1 to ${MOVIE_IDS_MAX}).`,
    },
  },
});

const movieProperties = {
  title: { type: ["string", "null"], description: "Null when the checkpoint has no title for the id." },
  genres: { type: "array", items: { type: "string" } },
};

export const moviesResponseSchema = deepFreeze({
  title: "MoviesResponse",
  type: "object",
  required: ["movies"],
  properties: {
    movies: {
      type: "array",
      description: "One entry per requested id, in the order asked.",
      items: {
        type: "object",
        required: ["id", "title", "genres"],
        properties: { id: { type: "integer" }, ...movieProperties },
      },
    },
  },
});

/** Query of GET /users/{user_id}/history. */
export const historyQuerySchema = deepFreeze({
  title: "HistoryQuery",
  type: "object",
  properties: {
    n: { type: "integer", minimum: 1, maximum: HISTORY_N_MAX, default: 20, description: "Most ratings returned." },
  },
});

export const historyResponseSchema = deepFreeze({
  title: "HistoryResponse",
  type: "object",
  required: ["user_id", "known", "ratings"],
  properties: {
    user_id: { type: "integer" },
    known: { type: "boolean", description: "False for a user the model does not know (no ratings)." },
    ratings: {
      type: "array",
      description: "The user's most recent ratings stored with the model, newest first.",
      items: {
        type: "object",
        required: ["movie_id", "rating", "timestamp", "title", "genres"],
        properties: {
          movie_id: { type: "integer" },
          rating: { type: "number" },
          timestamp: { type: "integer", description: "Unix seconds." },
          ...movieProperties,
        },
      },
    },
  },
});
