// Package sim is svc's built-in inference-engine simulator, for demos,
// tests and benchmarks. It is labelled as a simulator wherever it shows
// (Model.Simulated, EngineInfo.Simulated, owned_by "svc-sim").
//
// It has two faces sharing one generator:
//
//   - Engine, an in-process engine.Engine (`svc worker --engine sim`),
//     built with New and configured by ParseOptions from the text after
//     "sim=" in `--engine sim=tps=200,ttft=20ms`.
//   - Handler (NewHandler), an OpenAI-compatible HTTP server speaking the
//     plain protocol as vLLM and llama-server do: GET /v1/models,
//     POST /v1/chat/completions (SSE or not), POST /v1/embeddings,
//     POST /v1/audio/transcriptions (multipart, every OpenAI
//     response_format), POST /v1/audio/speech (wav or pcm) and
//     GET /health. Benchmarks hit it directly and the worker's openai
//     adapter is tested against it.
//
// Replies are deterministic: the words come from a PCG generator seeded by
// a hash of the model, the request's messages and its seed, so the same
// request always gets the same bytes. A reply is planned whole before it
// is sent (plan.go), with caps, stop sequences and notices applied; the
// faces then play it out in time (run.go) and render it (chunks.go).
//
// Audio has two models, sim-stt and sim-tts (audio.go). A transcription
// reads the upload once as it streams in, probing its headers for the
// length and hashing its bytes, and makes up a transcript seeded by that
// hash (transcript.go): segments of four to six seconds spanning the
// clip, with word timings when asked. Speech is synthesised, not
// recorded (speech.go): voiced letters with a pitch contour, pauses at
// spaces and punctuation, about 65 ms a letter, each voice at its own
// pitch. Both take Config.AudioRTF times the clip's length.
//
// Tests steer a request with directive lines in the last user message
// (the text parts of it when the content is an array), a transcription's
// prompt or a speech request's input (which does not say them aloud):
//
//	sim: tokens=N reasoning=N        content and thinking lengths
//	sim: tps=X ttft=20ms slow=5ms    per-request pacing
//	sim: tool=NAME json=1|broken     force a tool call or JSON output
//	sim: fail=STATUS [after=N]       fail with an HTTP status, before any
//	                                 output or after N tokens
//	sim: fail=cut [after=N]          break the connection off after N tokens
//	sim: hang=1                      produce nothing until cancelled
//	sim: rtf=X                       audio: work takes X times the clip
//
// Unknown keys are ignored; a known key with a bad value is a 400.
package sim
