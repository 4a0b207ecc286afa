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
//     POST /v1/chat/completions (SSE or not), POST /v1/embeddings and
//     GET /health. Benchmarks hit it directly and the worker's openai
//     adapter is tested against it.
//
// Replies are deterministic: the words come from a PCG generator seeded by
// a hash of the model, the request's messages and its seed, so the same
// request always gets the same bytes. A reply is planned whole before it
// is sent (plan.go), with caps, stop sequences and notices applied; the
// faces then play it out in time (run.go) and render it (chunks.go).
//
// Tests steer a request with directive lines in the last user message
// (the text parts of it when the content is an array):
//
//	sim: tokens=N reasoning=N        content and thinking lengths
//	sim: tps=X ttft=20ms slow=5ms    per-request pacing
//	sim: tool=NAME json=1|broken     force a tool call or JSON output
//	sim: fail=STATUS [after=N]       fail with an HTTP status, before any
//	                                 output or after N tokens
//	sim: fail=cut [after=N]          break the connection off after N tokens
//	sim: hang=1                      produce nothing until cancelled
//
// Unknown keys are ignored; a known key with a bad value is a 400.
package sim
