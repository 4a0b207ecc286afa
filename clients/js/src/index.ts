/**
 * Private (end-to-end encrypted) inference through an svc gateway.
 *
 * createPrivateFetch wraps fetch: passed as the fetch of the OpenAI SDK
 * (or any fetch-based client), it seals chat completions, embeddings,
 * rerank, image generation, speech and transcription requests to a
 * worker's public key and opens the replies, so the gateway relaying them
 * reads only the model and the message sizes. docs/e2e.md in the
 * repository describes the wire format.
 */
export { createPrivateFetch, MAX_REPLY } from "./fetch.js";
export type { PrivateFetch, PrivateFetchOptions, ServingWorker } from "./fetch.js";
export {
  E2EEError,
  E2ERequiredError,
  InvalidEncryptedRequestError,
  InvalidReplyError,
  KeyDirectoryError,
  NoKeyError,
  NoPrivateInferenceWorkerError,
  PlanRequiredError,
  PrivateInferenceError,
  TruncatedReplyError,
  UnsealableRequestError,
  e2eeError,
  privateInferenceError,
  readPrivateInferenceError,
} from "./errors.js";
export {
  AEAD_AES_256_GCM_ID,
  CONTENT_TYPE,
  KDF_HKDF_SHA256_ID,
  KEM_XWING,
  MAX_ENVELOPE,
  MAX_MODEL,
  VERSION,
  sealRequest,
} from "./envelope.js";
export type { Routing, Sealed } from "./envelope.js";
export { fingerprint, keyId } from "./keys.js";
export type { FetchLike, PublicKeyInfo } from "./keys.js";
export { ResponseOpener } from "./reply.js";
