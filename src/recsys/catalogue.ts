/**
 * The display data a checkpoint carries beside its model: movie titles and genres
 * (movies.json) and each known user's most recent ratings (the module's `history`).
 */
import { ServingError, asServingError } from "../errors.js";
import type { RawModule, RawTensor, RawValue } from "../native/types.js";
import { interfaceError, isTensor } from "./checkpoint.js";

/** A catalogue entry from the checkpoint's movies.json; unknown ids have a null title. */
export interface MovieInfo {
  id: number;
  title: string | null;
  genres: string[];
}

/** One of a user's most recent ratings, as stored in the checkpoint (newest first). */
export interface RatingEvent {
  movieId: number;
  rating: number;
  /** Unix seconds, as in ratings.csv. */
  timestamp: number;
}

export interface UserHistory {
  /** False for a user the model does not know: no ratings to show. */
  known: boolean;
  ratings: RatingEvent[];
}

export class MovieCatalogue {
  private constructor(private readonly entries: Map<number, { title: string; genres: string[] }>) {}

  /** movies.json: {"<raw id>": {"title", "genres"}}; absent in checkpoints trained without movies.csv. */
  static parse(text: string | undefined): MovieCatalogue {
    const movies = new Map<number, { title: string; genres: string[] }>();
    if (text === undefined) return new MovieCatalogue(movies);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw interfaceError(`movies.json is not JSON (${(err as Error).message})`);
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw interfaceError("movies.json must be an object keyed by raw movie id");
    }
    for (const [key, entry] of Object.entries(parsed as Record<string, { title?: unknown; genres?: unknown }>)) {
      const id = Number(key);
      if (!Number.isSafeInteger(id) || typeof entry?.title !== "string") continue;
      const genres = Array.isArray(entry.genres) ? entry.genres.filter((g): g is string => typeof g === "string") : [];
      movies.set(id, { title: entry.title, genres });
    }
    return new MovieCatalogue(movies);
  }

  get hasTitles(): boolean {
    return this.entries.size > 0;
  }

  /** Titles and genres of raw movie ids, in the order asked; unknown ids have a null title. */
  movies(ids: readonly number[]): MovieInfo[] {
    return ids.map((id) => {
      const movie = this.entries.get(id);
      return { id, title: movie?.title ?? null, genres: movie ? [...movie.genres] : [] };
    });
  }
}

/** The `n` most recent ratings the module stores for the user at internal `index`, newest first. */
export async function readHistory(module: RawModule, index: number, n: number): Promise<RatingEvent[]> {
  let value: RawValue;
  try {
    value = await module.run("history", [index, n]);
  } catch (err) {
    throw asServingError(err, "ERR_INFERENCE");
  }
  if (!Array.isArray(value) || value.length !== 3 || !value.every(isTensor)) {
    throw new ServingError("ERR_INFERENCE", "history() must return (ids, ratings, timestamps) tensors");
  }
  const [ids, ratings, times] = value as RawTensor[];
  const idData = ids!.data as BigInt64Array;
  const ratingData = ratings!.data as Float32Array;
  const timeData = times!.data as BigInt64Array;
  return Array.from(idData, (id, j) => ({ movieId: Number(id), rating: ratingData[j]!, timestamp: Number(timeData[j]) }));
}
