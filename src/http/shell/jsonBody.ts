/**
 * Reads a JSON body with a size limit. Failures become catalogue errors: too large -> 413;
 * malformed JSON, a non-JSON content type, a missing body or an unsupported charset or
 * encoding -> 422 like any other schema violation. A non-object JSON value is parsed and
 * left to the schema (which lists it as "Input should be a JSON object").
 */
import express, { type RequestHandler } from "express";
import { ServingError } from "../../errors.js";
import { MAX_BODY_BYTES } from "./schemas.js";
import { invalid } from "./validation.js";

const JSON_TYPE = "application/json";

const parseJson = express.json({ limit: MAX_BODY_BYTES, strict: false, type: JSON_TYPE });

export function jsonBody(): RequestHandler {
  return (req, res, next) => {
    parseJson(req, res, (err?: unknown) => {
      if (err !== undefined && err !== null) {
        next(bodyError(err));
        return;
      }
      if (req.body === undefined) {
        next(req.is(JSON_TYPE) === false ? wrongContentType(req.get("content-type")) : missingBody());
        return;
      }
      next();
    });
  };
}

function bodyError(err: unknown): ServingError {
  const { type, message } = err as { type?: string; message?: string };
  switch (type) {
    case "entity.too.large":
      return new ServingError("ERR_PAYLOAD_TOO_LARGE", `Request body exceeds ${MAX_BODY_BYTES} bytes`, { cause: err });
    case "request.aborted":
      return new ServingError("ERR_CANCELLED", "Client closed the request while sending the body", { cause: err });
    case "entity.parse.failed":
      return invalid([{ loc: ["body"], msg: `JSON decode error: ${message}`, type: "json_invalid" }]);
    case "charset.unsupported":
    case "encoding.unsupported":
      return invalid([{ loc: ["body"], msg: String(message), type: type.replace(".", "_") }]);
    default:
      return invalid([{ loc: ["body"], msg: `Unreadable body: ${message}`, type: "body_unreadable" }]);
  }
}

function wrongContentType(contentType: string | undefined): ServingError {
  const got = contentType === undefined ? "none" : JSON.stringify(contentType);
  return invalid([{ loc: ["body"], msg: `Content-Type must be ${JSON_TYPE} (got ${got})`, type: "content_type" }]);
}

function missingBody(): ServingError {
  return invalid([{ loc: ["body"], msg: "Field required", type: "missing" }]);
}
