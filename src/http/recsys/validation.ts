/** The recommendation app's path and query parameters validated from Express's raw strings. */
import type { ValidateFunction } from "ajv/dist/2020.js";
import { check, compile, invalid, tryCheck, type ValidationIssue } from "../shell/validation.js";
import { historyQuerySchema, moviesQuerySchema, recommendPathSchema, recommendQuerySchema } from "./schemas.js";

const validateRecommendPath = compile(recommendPathSchema);
const validateRecommendQuery = compile(recommendQuerySchema);
const validateMoviesQuery = compile(moviesQuerySchema);
const validateHistoryQuery = compile(historyQuerySchema);

/** Validates GET /recommend/{user_id}?k= from Express's raw strings. */
export function parseRecommendRequest(
  params: Record<string, unknown>,
  query: Record<string, unknown>,
): { userId: number; k: number } {
  const { userId, value } = parseUserAndInteger(params, query, "k", validateRecommendQuery);
  return { userId, k: value };
}

/** Validates GET /movies?ids=1,2,3: each comma-separated piece must be an integer. */
export function parseMoviesRequest(query: Record<string, unknown>): { ids: number[] } {
  const raw = query["ids"];
  const ids = typeof raw === "string" ? raw.split(",").map(integerOrRaw) : raw;
  return check<{ ids: number[] }>(validateMoviesQuery, ids === undefined ? {} : { ids }, "query");
}

/** Validates GET /users/{user_id}/history?n=. */
export function parseHistoryRequest(
  params: Record<string, unknown>,
  query: Record<string, unknown>,
): { userId: number; n: number } {
  const { userId, value } = parseUserAndInteger(params, query, "n", validateHistoryQuery);
  return { userId, n: value };
}

/** A `user_id` path parameter and one optional integer query parameter, issues of both listed together. */
function parseUserAndInteger(
  params: Record<string, unknown>,
  query: Record<string, unknown>,
  name: string,
  validateQuery: ValidateFunction,
): { userId: number; value: number } {
  const issues: ValidationIssue[] = [];
  const path = tryCheck<{ user_id: number }>(validateRecommendPath, { user_id: integerOrRaw(params["user_id"]) }, "path", issues);
  const raw = query[name];
  const q = tryCheck<Record<string, number>>(validateQuery, raw === undefined ? {} : { [name]: integerOrRaw(raw) }, "query", issues);
  if (path === undefined || q === undefined) throw invalid(issues);
  return { userId: path.user_id, value: q[name]! };
}

/** Path and query values are strings; only an optional minus and digits make an integer. */
function integerOrRaw(value: unknown): unknown {
  return typeof value === "string" && /^-?[0-9]+$/.test(value) ? Number(value) : value;
}
