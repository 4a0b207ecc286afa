// Errors callers branch on. Like the Go package's, their messages never
// quote a request body or sealed content (at most the gateway's own clear
// error message), so they can be logged or shown as they are.

/** The base of every error this package throws or returns. */
export class E2EEError extends Error {
  override name = "E2EEError";
}

/**
 * The key directory lists no usable key for the model (Go: ErrNoKey). The
 * request was not sent.
 */
export class NoKeyError extends E2EEError {
  override name = "NoKeyError";
  /** worker is the worker the request was pinned to (X-Svc-Worker-Id), if it was. */
  constructor(
    readonly model: string,
    readonly worker?: string,
  ) {
    super(
      `e2ee: no private inference key for the model ${JSON.stringify(model)}` +
        (worker === undefined ? "" : ` on the worker ${worker} named by X-Svc-Worker-Id`),
    );
  }
}

/**
 * The request cannot be sealed (no body, no model, a body whose routing
 * fields are ambiguous, too large). It is never sent in the clear.
 */
export class UnsealableRequestError extends E2EEError {
  override name = "UnsealableRequestError";
}

/** The key directory answered something that is not a key list. */
export class KeyDirectoryError extends E2EEError {
  override name = "KeyDirectoryError";
}

/**
 * A reply that fails to open, is reordered or modified, or is not sealed
 * where it must be (Go: ErrInvalidReply).
 */
export class InvalidReplyError extends E2EEError {
  override name = "InvalidReplyError";
}

/** A reply that ended before its final chunk (Go: ErrTruncated). */
export class TruncatedReplyError extends E2EEError {
  override name = "TruncatedReplyError";
}

/**
 * A refusal of the gateway from the specification's table of private
 * inference errors. The fetch returns these as the gateway's responses, as
 * fetch does any HTTP error, so SDKs report them as they would on a clear
 * request; privateInferenceError and readPrivateInferenceError turn the
 * SDK's error or the response into one of the subclasses.
 */
export class PrivateInferenceError extends E2EEError {
  override name = "PrivateInferenceError";
  constructor(
    message: string,
    /** HTTP status of the refusal. */
    readonly status: number,
    /** detail.error.type, or the X-Svc-Error-Code for the 503. */
    readonly type: string,
    /** X-Request-Id, when the gateway sent one. */
    readonly requestId: string | null,
  ) {
    super(message);
  }
}

/** 403 e2e_required: the organisation refuses unencrypted inference. */
export class E2ERequiredError extends PrivateInferenceError {
  override name = "E2ERequiredError";
}

/**
 * 403 plan_required: private inference is not on the organisation's plan
 * (a sealed request, or the key directory fetch).
 */
export class PlanRequiredError extends PrivateInferenceError {
  override name = "PlanRequiredError";
}

/** 400 invalid_encrypted_request: malformed or unsupported envelope. */
export class InvalidEncryptedRequestError extends PrivateInferenceError {
  override name = "InvalidEncryptedRequestError";
}

/**
 * 503 with X-Svc-Error-Code no_private_inference_worker: no connected
 * worker holds the key, still so after one key refresh and one retry.
 */
export class NoPrivateInferenceWorkerError extends PrivateInferenceError {
  override name = "NoPrivateInferenceWorkerError";
}

export const NO_WORKER_CODE = "no_private_inference_worker";
export const ERROR_CODE_HEADER = "x-svc-error-code";

type HeaderSource = { get(name: string): string | null } | Record<string, unknown> | undefined | null;

function headerOf(h: HeaderSource, name: string): string | null {
  if (!h) return null;
  if (typeof (h as { get?: unknown }).get === "function") {
    return (h as { get(name: string): string | null }).get(name);
  }
  for (const [k, v] of Object.entries(h)) {
    if (k.toLowerCase() === name && typeof v === "string") return v;
  }
  return null;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

// errorType finds the error type in any of the gateway's body shapes:
// detail.error.type (the private-inference errors' nested shape),
// error.type, or a type at the top (an SDK that unwrapped error already).
function errorType(body: unknown): string {
  if (!isObject(body)) return "";
  const detail = body.detail;
  if (isObject(detail) && isObject(detail.error) && typeof detail.error.type === "string") return detail.error.type;
  if (isObject(body.error) && typeof body.error.type === "string") return body.error.type;
  if (typeof body.type === "string") return body.type;
  return "";
}

/**
 * clearMessage finds the human message in a clear error body of any of
 * the gateway's shapes (error.message, detail.error.message, detail,
 * error), shortened and stripped of control characters, as the Go
 * package's clearMessage does.
 */
export function clearMessage(body: unknown): string {
  if (!isObject(body)) return "";
  let msg = messageOf(body.error) || messageOf(body.detail) || (typeof body.message === "string" ? body.message : "");
  // eslint-disable-next-line no-control-regex
  msg = msg.replace(/[\u0000-\u001f\u007f-\u009f]/g, " ");
  if (msg.length > 300) msg = msg.slice(0, 300) + "…";
  return msg;
}

function messageOf(v: unknown): string {
  if (typeof v === "string") return v;
  if (!isObject(v)) return "";
  if (typeof v.message === "string" && v.message !== "") return v.message;
  if (v.error !== undefined) return messageOf(v.error);
  return "";
}

/**
 * classify maps a refusal to its class, or undefined when it is not one of
 * the private inference errors.
 */
export function classify(status: number, headers: HeaderSource, body: unknown): PrivateInferenceError | undefined {
  const requestId = headerOf(headers, "x-request-id");
  const message = clearMessage(body);
  if (status === 503 && headerOf(headers, ERROR_CODE_HEADER) === NO_WORKER_CODE) {
    return new NoPrivateInferenceWorkerError(
      message || "no connected worker holds the key the request was sealed to",
      status,
      NO_WORKER_CODE,
      requestId,
    );
  }
  const type = errorType(body);
  const make = (C: typeof PrivateInferenceError) => new C(message || type, status, type, requestId);
  if (status === 403 && type === "e2e_required") return make(E2ERequiredError);
  if (status === 403 && type === "plan_required") return make(PlanRequiredError);
  if (status === 400 && type === "invalid_encrypted_request") return make(InvalidEncryptedRequestError);
  return undefined;
}

/**
 * privateInferenceError turns what an SDK threw (the OpenAI SDK's APIError
 * has status, headers and the parsed body as error) into the matching
 * private inference error, or undefined for any other error. An error of
 * this package's is returned as it is.
 */
export function privateInferenceError(err: unknown): PrivateInferenceError | undefined {
  for (let e = err, depth = 0; isObject(e) || e instanceof Error; depth++) {
    if (e instanceof PrivateInferenceError) return e;
    const o = e as Record<string, unknown>;
    if (typeof o.status === "number") {
      return classify(o.status, o.headers as HeaderSource, o.error ?? o.body);
    }
    if (depth > 4) break;
    e = o.cause;
  }
  return undefined;
}

/**
 * e2eeError finds this package's error in what a client threw: the OpenAI
 * SDK wraps an error its fetch threw (NoKeyError, InvalidReplyError...) in
 * its APIConnectionError, as cause. Any E2EEError is returned, the
 * private inference errors of responses included; undefined for others.
 */
export function e2eeError(err: unknown): E2EEError | undefined {
  for (let e = err, depth = 0; isObject(e) || e instanceof Error; depth++) {
    if (e instanceof E2EEError) return e;
    if (depth > 4) break;
    e = (e as Record<string, unknown>).cause;
  }
  return privateInferenceError(err);
}

/**
 * readPrivateInferenceError reads a fetch response and returns the
 * matching private inference error, or undefined. It reads a clone, so the
 * response's body stays readable.
 */
export async function readPrivateInferenceError(response: Response): Promise<PrivateInferenceError | undefined> {
  if (response.ok) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(await response.clone().text());
  } catch {
    body = undefined;
  }
  return classify(response.status, response.headers, body);
}
