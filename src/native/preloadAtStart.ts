/**
 * Imported first by `npm start` (src/server.ts), for its side effect: the addon, and libtorch
 * with it, starts loading on a worker thread while this thread evaluates the server's other
 * modules (Express, the HTTP layer, the engine: about 0.4 s), instead of after them.
 */
import { preloadAddon } from "./binding.js";

void preloadAddon();
