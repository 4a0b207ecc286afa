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
//     POST /v1/chat/completions (SSE or not), POST /v1/completions (raw
//     prompts, not streamed), POST /v1/embeddings, POST /v1/rerank,
//     POST /v1/images/generations (b64_json),
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
// sim-rerank ranks documents by the share of the query's distinct words
// each holds (rerank.go): an exact match scores 1, best first, ties in
// the order sent. sim-image draws PNGs (image.go): a gradient between two
// colours with rings about a point, all from a hash of the model, prompt,
// seed and the image's place, at the size asked up to 1024 pixels a side
// (a larger size is drawn scaled down, its shape kept); each PNG carries
// a Software text saying it is simulated. The option incomplete=ID lists
// a model as not fully installed (Model.Incomplete, a file missing): the
// gateway then sends it no image generation, and the engine, asked
// anyway, answers 409.
//
// Engine is also an engine.Installer, so `svc worker --pull ID` works
// against it: Pull pretends to download 4 GiB over Config.PullTime
// (option pull, 3 s by default), reporting progress in Ollama's steps,
// and then serves ID as a plain simulated chat model. Installing a model
// it serves already succeeds at once.
//
// Tools are used as a tool-using model would, deterministically: with
// tool_choice auto (or none given) it calls the tool the last user message
// is about (the most words of a tool's name in it, or else of its
// description; verbs such as get or search aside), and once the last
// message is a tool's result it answers in text. A "sim: tool=NAME"
// directive forces a call but for the latter; required and a named tool
// always call. A worker's web tools come first under auto: a message with
// an http(s) URL calls web_fetch with it, one that asks to "search" or
// "look up" calls web_search with what follows, when those tools are
// offered.
//
// A completion (api.KindCompletion, POST /v1/completions) is planned as
// the chat reply to its prompt as one user message, without thinking: a
// raw prompt has no chat template to open a thinking block.
//
// Seven guard models stand for the moderation models of the service
// (guard.go), with the answers of the real families word for word, so
// that the worker's prompt builders and verdict parsers run end to end:
//
//	guard-a:1b, guard-a:8b       Llama Guard 3: a raw prompt (completion)
//	                             or messages (chat); "safe" or
//	                             "unsafe\nS1,S10"; S14 on the 8b only
//	guard-b:0.6b, :4b, :8b       Qwen3Guard-Gen: messages; "Safety: Unsafe
//	                             \nCategories: Violent", plus "\nRefusal:
//	                             Yes|No" when judging a reply
//	guard-c:4b, guard-c:0.8b     LlavaGuard: text and image parts; a JSON
//	                             rating, category and rationale
//
// A guard judges the last message of the role its check is about: the
// last User or Agent turn a Llama Guard prompt names, else the last user
// or assistant message (an assistant message is a reply check). A
// LlavaGuard message's text part that holds its policy (the part asking
// for a "rating") is not read for keywords, and when the text has a line
// "Assistant reply (assess this):", only the text after it is judged, as
// a reply to the text before: the worker's layout of a reply check, which
// LlavaGuard has none of. Images are never looked at.
//
// A verdict directive anywhere in the judged message decides; without
// one, a keyword table gives plausible verdicts for demos. Keywords match
// at the start of a word, case and punctuation aside:
//
//	keywords                      Llama Guard  Qwen3Guard                    LlavaGuard
//	kill, murder, shoot           S1           Violent                       O2
//	a card number (13-16 digits)  S7           PII                           -
//	bomb, explosive               S9           Violent                       O6
//	hateful                       S10          Unethical Acts                O1
//	suicide, self-harm            S11          Suicide & Self-Harm           O7
//	election                      S13          Politically Sensitive Topics  -
//	                                           (Controversial)
//	rm -rf                        S14, 8b      Non-violent Illegal Acts      -
//	ignore (all) previous         -            Jailbreak, in prompts         -
//	instructions
//
// A Llama Guard never gives a category its prompt leaves out of the list.
//
// Tests steer a request with directive lines in the last user message
// (the text parts of it when the content is an array), a transcription's
// prompt, a speech request's input (which does not say them aloud), a
// rerank's query or an image's prompt:
//
//	sim: tokens=N reasoning=N        content and thinking lengths
//	sim: tps=X ttft=20ms slow=5ms    per-request pacing
//	sim: tool=NAME json=1|broken     force a tool call or JSON output
//	sim: fail=STATUS [after=N]       fail with an HTTP status, before any
//	                                 output or after N tokens
//	sim: fail=cut [after=N]          break the connection off after N tokens
//	sim: hang=1                      produce nothing until cancelled
//	sim: rtf=X                       audio: work takes X times the clip
//	sim: verdict=V labels=L1,L2      guards: V is safe, unsafe, borderline
//	                                 (Controversial to Qwen3Guard, unsafe
//	                                 to the others) or malformed ("I cannot
//	                                 help with that.", no verdict at all);
//	                                 labels alone mean unsafe
//	sim: reply_verdict=V reply_labels=L
//	                                 guards: in a prompt, decides the check
//	                                 of the reply to it, unless the reply
//	                                 has a verdict directive of its own
//
// A guard reads directives from the message it judges, so fail, hang and
// pacing directives there fail or slow the check. As everywhere, fail acts
// before any work; "ttft=800ms fail=503 after=1" fails after the TTFT,
// with nothing sent unless the answer is streamed (a worker's checks never
// are). Labels are the family's
// own, "_" standing for a space (Unethical_Acts); Llama Guard codes and
// Qwen3Guard names match in any case, a LlavaGuard code (O2) stands for
// its full category, and a label the family does not know is given as
// written. An unsafe verdict without labels takes the keyword table's,
// else the family's stock label (S1, Violent or Politically Sensitive
// Topics, O2).
//
// Unknown keys are ignored; a known key with a bad value is a 400.
package sim
