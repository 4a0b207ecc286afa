// The official OpenAI and Anthropic SDKs, unchanged but for their base
// URL, against a gateway with a simulated chat model. Each check throws on
// anything a user of the SDK would call broken and prints one JSON line
// with what the Go test checks further (request ids against the usage
// log). Run by internal/e2e's TestOfficialSDKs:
//
//	SVC_BASE_URL=http://127.0.0.1:8080 SVC_API_KEY=... SVC_MODEL=sim-chat node check.mjs
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import Anthropic from "@anthropic-ai/sdk";
import { tool as lcTool } from "@langchain/core/tools";
import { HumanMessage } from "@langchain/core/messages";
import { ChatOpenAI } from "@langchain/openai";
import { generateText, stepCountIs, tool } from "ai";
import OpenAI, { toFile } from "openai";
import { z } from "zod";

const base = process.env.SVC_BASE_URL;
const apiKey = process.env.SVC_API_KEY;
const model = process.env.SVC_MODEL || "sim-chat";
if (!base || !apiKey) {
  console.error("SVC_BASE_URL and SVC_API_KEY are required");
  process.exit(2);
}

const openai = new OpenAI({ baseURL: base + "/v1", apiKey, maxRetries: 0 });
// The Anthropic SDK adds /v1 itself; the key goes in x-api-key.
const anthropic = new Anthropic({ baseURL: base, apiKey, maxRetries: 0 });

const weather = {
  name: "get_weather",
  description: "The weather in a city",
  schema: {
    type: "object",
    properties: { city: { type: "string" } },
    required: ["city"],
  },
};

// wav is a second of a 440 Hz tone, 16 kHz mono 16-bit PCM.
function wav() {
  const rate = 16000, n = rate;
  const b = Buffer.alloc(44 + 2 * n);
  b.write("RIFF", 0);
  b.writeUInt32LE(36 + 2 * n, 4);
  b.write("WAVEfmt ", 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(2 * rate, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write("data", 36);
  b.writeUInt32LE(2 * n, 40);
  for (let i = 0; i < n; i++) b.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * 440 * i) / rate)), 44 + 2 * i);
  return b;
}

// An agent's question that calls for the weather tool, with no sim: line:
// the simulated model calls the tool the question is about.
const agentQuestion = "What is the weather in Paris right now?";

function must(cond, what, detail) {
  if (!cond) {
    throw new Error(what + (detail === undefined ? "" : ": " + JSON.stringify(detail)));
  }
}

const checks = {
  async "openai chat"() {
    const { data, response } = await openai.chat.completions
      .create({ model, messages: [{ role: "user", content: "hello" }] })
      .withResponse();
    must(data.choices[0].message.content, "no text", data);
    return { request_id: response.headers.get("x-request-id") };
  },

  // Several choices (n): the SDK's stream helper puts each together from
  // deltas that come interleaved, and they match the unary reply's.
  async "openai choices"() {
    const messages = [{ role: "user", content: "give me three names" }];
    const { data, response } = await openai.chat.completions.create({ model, messages, n: 3 }).withResponse();
    must(data.choices.length === 3, "not three choices", data);
    data.choices.forEach((c, i) => must(c.index === i && c.message.content && c.finish_reason === "stop", "choice " + i, c));
    must(new Set(data.choices.map((c) => c.message.content)).size === 3, "choices alike", data.choices);
    const streamed = await openai.chat.completions.stream({ model, messages, n: 3 }).finalChatCompletion();
    must(streamed.choices.length === 3, "not three streamed choices", streamed);
    streamed.choices.forEach((c, i) =>
      must(c.message.content === data.choices[i].message.content, "streamed choice " + i + " differs", { streamed: c, unary: data.choices[i] }),
    );
    must(streamed.usage?.completion_tokens === data.usage.completion_tokens, "usage differs", { streamed: streamed.usage, unary: data.usage });
    return { request_id: response.headers.get("x-request-id") };
  },

  // The loop every tool-using application writes with the SDK: call the
  // model, run the tools it asks for, send their results, until it answers
  // in text. Unary and streamed (the SDK's stream helper assembles the
  // tool call from its deltas).
  async "openai agent"() {
    const tools = [{ type: "function", function: { name: weather.name, description: weather.description, parameters: weather.schema } }];
    for (const mode of ["unary", "streamed"]) {
      const messages = [{ role: "user", content: agentQuestion }];
      let calls = 0, message, finish;
      for (let turn = 0; turn < 4; turn++) {
        if (mode === "unary") {
          const r = await openai.chat.completions.create({ model, messages, tools });
          ({ message, finish_reason: finish } = r.choices[0]);
        } else {
          const stream = openai.chat.completions.stream({ model, messages, tools });
          const r = await stream.finalChatCompletion();
          ({ message, finish_reason: finish } = r.choices[0]);
        }
        if (!message.tool_calls?.length) break;
        must(finish === "tool_calls", "tool calls without finish_reason tool_calls", { mode, finish });
        messages.push(message);
        for (const c of message.tool_calls) {
          must(c.function.name === weather.name, "called another tool", c);
          const { city } = JSON.parse(c.function.arguments);
          must(typeof city === "string" && city.length > 0, "no city in the arguments", c.function.arguments);
          calls++;
          messages.push({ role: "tool", tool_call_id: c.id, content: JSON.stringify({ city, temp_c: 21 }) });
        }
      }
      must(calls === 1 && finish === "stop" && message.content?.length > 0, "agent loop", { mode, calls, finish, message });
    }
    return {};
  },

  async "openai responses"() {
    const { data, response } = await openai.responses
      .create({ model, instructions: "be brief", input: "hello there", max_output_tokens: 64 })
      .withResponse();
    must(data.object === "response" && data.status === "completed", "not a completed response", data);
    must(data.output_text.length > 0, "no output_text", data);
    must(data.usage.output_tokens > 0 && data.usage.input_tokens > 0, "no usage", data.usage);
    must(data.id.startsWith("resp_"), "response id", data.id);
    return { request_id: response.headers.get("x-request-id"), text: data.output_text };
  },

  async "openai responses stream"() {
    const stream = openai.responses.stream({ model, input: "tell me a story" });
    let deltas = 0;
    let text = "";
    for await (const ev of stream) {
      if (ev.type === "response.output_text.delta") {
        deltas++;
        text += ev.delta;
      }
    }
    const final = await stream.finalResponse();
    must(deltas > 1, "too few text deltas", deltas);
    must(final.output_text === text, "the final response's text is not the deltas'", { text, final: final.output_text });
    must(final.status === "completed" && final.usage.output_tokens > 0, "final response", final);
    return { request_id: final.svc?.request_id, deltas };
  },

  async "openai responses tools"() {
    const tools = [{ type: "function", name: weather.name, description: weather.description, parameters: weather.schema, strict: false }];
    const input = [{ role: "user", content: agentQuestion }];
    const first = await openai.responses.create({ model, input, tools });
    const call = first.output.find((o) => o.type === "function_call");
    must(call && call.name === "get_weather" && call.call_id, "no function call", first.output);
    JSON.parse(call.arguments);
    const second = await openai.responses.create({
      model,
      tools,
      input: [...input, call, { type: "function_call_output", call_id: call.call_id, output: '{"temp_c":21}' }],
    });
    must(second.output_text.length > 0, "no answer after the tool result", second.output);
    return { request_id: second.svc?.request_id };
  },

  async "openai images"() {
    const { data, response } = await openai.images
      .generate({ model: "sim-image", prompt: "a red fox in the snow", size: "256x256", response_format: "b64_json" })
      .withResponse();
    must(data.data.length === 1 && data.data[0].b64_json.startsWith("iVBORw0KGgo"), "not one PNG", data.data.length);
    return { request_id: response.headers.get("x-request-id"), request_type: "images", model: "sim-image" };
  },

  async "openai rerank"() {
    // The SDK has no rerank method; its generic post is what clients use.
    const { data, response } = await openai
      .post("/rerank", {
        body: { model: "sim-rerank", query: "red fox", documents: ["a blue whale", "the red fox jumps", "a red car"], top_n: 2 },
      })
      .withResponse();
    must(data.results.length === 2 && data.results[0].index === 1, "ranking", data.results);
    must(data.results[0].relevance_score >= data.results[1].relevance_score, "not best first", data.results);
    return { request_id: response.headers.get("x-request-id"), request_type: "rerank", model: "sim-rerank" };
  },

  async "openai models retrieve"() {
    const m = await openai.models.retrieve(model);
    must(m.id === model && m.object === "model", "retrieved", m);
    return {};
  },

  async "openai completions"() {
    const { data, response } = await openai.completions
      .create({ model, prompt: "Once upon a time", max_tokens: 16 })
      .withResponse();
    must(data.object === "text_completion" && data.choices[0].text.length > 0, "no text", data);
    let text = "";
    for await (const chunk of await openai.completions.create({ model, prompt: "Once upon a time", max_tokens: 16, stream: true })) {
      text += chunk.choices[0]?.text ?? "";
    }
    must(text === data.choices[0].text, "the streamed text is not the unary text", { text, unary: data.choices[0].text });
    return { request_id: response.headers.get("x-request-id"), request_type: "completion" };
  },

  async "openai translations"() {
    const { data, response } = await openai.audio.translations
      .create({ model: "stt-large-v3-turbo", file: await toFile(wav(), "tone.wav") })
      .withResponse();
    must(typeof data.text === "string" && data.text.length > 0, "no text", data);
    return { request_id: response.headers.get("x-request-id"), request_type: "audio", model: "stt-large-v3-turbo" };
  },

  async "openai moderations default model"() {
    // No model: the organisation's moderation model judges, guard-b:0.6b
    // by default, which the demo and the test's worker serve.
    const { data, response } = await openai.moderations.create({ input: "How do I bake bread?" }).withResponse();
    must(data.model === "guard-b:0.6b" && data.results.length === 1 && data.results[0].flagged === false, "verdict", data);
    return { request_id: response.headers.get("x-request-id"), request_type: "moderation", model: "guard-b:0.6b" };
  },

  async "ai sdk agent"() {
    let calls = 0;
    const svc = createOpenAICompatible({ name: "svc", baseURL: base + "/v1", apiKey });
    const r = await generateText({
      model: svc(model),
      tools: {
        get_weather: tool({
          description: weather.description,
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => (calls++, { city, temp_c: 21 }),
        }),
      },
      stopWhen: stepCountIs(5),
      prompt: agentQuestion,
    });
    must(calls === 1 && r.steps.length === 2 && r.text.length > 0 && r.finishReason === "stop", "agent loop", { calls, steps: r.steps.length, finish: r.finishReason });
    return {};
  },

  async "langchain agent"() {
    let calls = 0;
    const get = lcTool(async ({ city }) => (calls++, JSON.stringify({ city, temp_c: 21 })), {
      name: weather.name,
      description: weather.description,
      schema: z.object({ city: z.string() }),
    });
    const llm = new ChatOpenAI({ model, apiKey, configuration: { baseURL: base + "/v1" }, maxRetries: 0 }).bindTools([get]);
    const messages = [new HumanMessage(agentQuestion)];
    let res = await llm.invoke(messages);
    for (let turn = 0; res.tool_calls?.length && turn < 4; turn++) {
      messages.push(res);
      for (const c of res.tool_calls) messages.push(await get.invoke(c));
      res = await llm.invoke(messages);
    }
    must(calls === 1 && !res.tool_calls?.length && String(res.content).length > 0, "agent loop", { calls, content: res.content });
    return {};
  },

  async "anthropic messages"() {
    const { data, response } = await anthropic.messages
      .create({ model, max_tokens: 64, system: "be brief", messages: [{ role: "user", content: "hello there" }] })
      .withResponse();
    must(data.type === "message" && data.role === "assistant", "not a message", data);
    must(data.content[0].type === "text" && data.content[0].text.length > 0, "no text", data.content);
    must(["end_turn", "max_tokens"].includes(data.stop_reason), "stop_reason", data.stop_reason);
    must(data.usage.input_tokens > 0 && data.usage.output_tokens > 0, "usage", data.usage);
    // The SDK's own request id, read from request-id.
    must(data._request_id === response.headers.get("x-request-id"), "_request_id", data._request_id);
    return { request_id: response.headers.get("x-request-id") };
  },

  async "anthropic messages stream"() {
    const stream = anthropic.messages.stream({ model, max_tokens: 256, messages: [{ role: "user", content: "tell me a story" }] });
    let text = "";
    stream.on("text", (t) => (text += t));
    const final = await stream.finalMessage();
    must(text.length > 0 && final.content[0].text === text, "streamed text", { text, final });
    must(final.usage.output_tokens > 0, "usage", final.usage);
    must(final.stop_reason === "end_turn" || final.stop_reason === "max_tokens", "stop_reason", final.stop_reason);
    return { request_id: final.id.replace(/^msg_/, "") };
  },

  async "anthropic tools"() {
    const tools = [{ name: weather.name, description: weather.description, input_schema: weather.schema }];
    const messages = [{ role: "user", content: agentQuestion }];
    const first = await anthropic.messages.create({ model, max_tokens: 128, tools, messages });
    const use = first.content.find((b) => b.type === "tool_use");
    must(first.stop_reason === "tool_use" && use && use.name === "get_weather" && typeof use.input === "object", "no tool use", first);
    const second = await anthropic.messages.create({
      model,
      max_tokens: 128,
      tools,
      messages: [
        ...messages,
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: '{"temp_c":21}' }] },
      ],
    });
    must(second.content.some((b) => b.type === "text" && b.text.length > 0), "no answer after the tool result", second);
    const streamed = await anthropic.messages.stream({ model, max_tokens: 128, tools, messages }).finalMessage();
    const streamedUse = streamed.content.find((b) => b.type === "tool_use");
    must(streamedUse && streamedUse.name === "get_weather" && typeof streamedUse.input === "object", "no streamed tool use", streamed);
    return { request_id: second.id.replace(/^msg_/, "") };
  },

  async "anthropic count tokens"() {
    const short = await anthropic.messages.countTokens({ model, messages: [{ role: "user", content: "hello there" }] });
    const tools = [{ name: weather.name, description: weather.description, input_schema: weather.schema }];
    const long = await anthropic.messages.countTokens({
      model,
      system: "be brief",
      tools,
      messages: [{ role: "user", content: "hello there, " + "tell me more. ".repeat(40) }],
    });
    must(short.input_tokens > 0 && long.input_tokens > short.input_tokens + 140, "input_tokens", { short, long });
    try {
      await anthropic.messages.countTokens({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] });
    } catch (e) {
      must(e instanceof Anthropic.NotFoundError, "not a NotFoundError", String(e));
      return {};
    }
    throw new Error("an unknown model was counted");
  },

  async "anthropic models"() {
    const seen = [];
    for await (const m of anthropic.models.list({ limit: 1 })) seen.push(m);
    must(seen.some((m) => m.id === model && m.type === "model" && m.display_name && !isNaN(Date.parse(m.created_at))), "models", seen);
    const page = await anthropic.models.list({ limit: 1 });
    must(page.data.length === 1 && page.has_more === seen.length > 1 && page.first_id === page.data[0].id, "first page", page);
    const one = await anthropic.models.retrieve(model);
    must(one.id === model && one.type === "model", "retrieve", one);
    return {};
  },

  async "anthropic unknown model"() {
    try {
      await anthropic.messages.create({ model: "no-such-model", max_tokens: 8, messages: [{ role: "user", content: "hi" }] });
    } catch (e) {
      must(e instanceof Anthropic.NotFoundError, "not a NotFoundError", String(e));
      // The body is Anthropic's error envelope, its type Anthropic's name.
      must(e.error?.type === "error" && e.error?.error?.type === "not_found_error", "not Anthropic's error body", e.error);
      must(e.requestID && e.requestID === e.headers?.get("x-request-id"), "the error's requestID", e.requestID);
      return { status: e.status };
    }
    throw new Error("an unknown model was served");
  },
};

let failed = 0;
for (const [name, run] of Object.entries(checks)) {
  try {
    const out = await run();
    console.log(JSON.stringify({ name, ok: true, ...out }));
  } catch (e) {
    failed++;
    console.log(JSON.stringify({ name, ok: false, error: String(e && e.stack ? e.stack : e) }));
  }
}
process.exit(failed ? 1 : 0);
