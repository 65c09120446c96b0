/** The end-to-end test's "looks like English" must accept a mediocre Brown model and reject noise. */
import { expect } from "chai";
import { englishVerdict } from "./english.js";

/** A deterministic stand-in for an untrained byte model: uniform random bytes. */
function randomBytes(seed: number, length: number): Uint8Array {
  let state = seed >>> 0;
  return Uint8Array.from({ length }, () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state >>> 24;
  });
}

describe("englishVerdict (used by the end-to-end test)", function () {
  const accepted = {
    "Brown corpus prose":
      "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election produced " +
      "no evidence that any irregularities took place. The jury further said in term-end presentments that the " +
      "City Executive Committee, which had over-all charge of the election, deserves the praise and thanks.",
    "a small model's misspelled continuation":
      " commitee was not in the state of the seasion, and he said that the mant of the prosident had been " +
      "reperted to the hause. It was a grat deal of the pepple who were in the city, and the",
  };
  const rejected = {
    "uniform random bytes": new TextDecoder().decode(randomBytes(7, 200)),
    "random lowercase letters and spaces": Array.from(randomBytes(11, 200), (b) => (b % 27 === 26 ? " " : String.fromCharCode(97 + (b % 27)))).join(""),
    "one letter repeated": "a".repeat(200),
    "too short to judge": "the end",
    "empty": "",
  };

  for (const [name, text] of Object.entries(accepted)) {
    it(`accepts ${name}`, () => {
      const verdict = englishVerdict(text);
      expect(verdict.ok, verdict.measures.join("\n")).to.equal(true);
    });
  }
  for (const [name, text] of Object.entries(rejected)) {
    it(`rejects ${name}`, () => {
      expect(englishVerdict(text).ok, JSON.stringify(text)).to.equal(false);
    });
  }
});
