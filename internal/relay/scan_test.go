package relay

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/jsontext"
)

// refChunk is how the relay read chunks before the scanner: the reference
// the scanner must agree with.
type refChunk struct {
	ID      string `json:"id"`
	Choices []struct {
		Delta struct {
			Content          string          `json:"content"`
			ReasoningContent string          `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// chunkView is what the relay learns from a chunk.
type chunkView struct {
	OK      bool
	ID      string
	Choices []choiceView
}

type choiceView struct {
	Text               string
	Content, Reasoning string
	ToolCalls          bool
	Finish             *string
}

func decodedChunk(msg []byte) chunkView {
	var ch refChunk
	if json.Unmarshal(msg, &ch) != nil {
		return chunkView{}
	}
	v := chunkView{OK: true, ID: ch.ID}
	for _, c := range ch.Choices {
		v.Choices = append(v.Choices, choiceView{c.Text, c.Delta.Content, c.Delta.ReasoningContent, present(c.Delta.ToolCalls), c.FinishReason})
	}
	return v
}

func scannedChunk(s *chunkScan, msg []byte) chunkView {
	if !s.read(msg) {
		return chunkView{}
	}
	v := chunkView{OK: true, ID: string(s.id)}
	for _, c := range s.choices {
		cv := choiceView{Text: string(c.text), Content: string(c.content), Reasoning: string(c.reasoning), ToolCalls: c.toolCalls}
		if c.finished {
			f := string(c.finish)
			cv.Finish = &f
		}
		v.Choices = append(v.Choices, cv)
	}
	return v
}

// chunkCases are chunks engines send and chunks no engine should, each of
// which the scanner must read as encoding/json decodes it.
var chunkCases = []string{
	`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"Hi","logprobs":null,"finish_reason":null}]}`,
	`{"id":"cmpl-1","choices":[{"text":null,"TEXT":"a\u00e9"},{"text":"","finish_reason":"length"}]}`,
	`{"choices":[{"text":5}]}`,
	`{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}`,
	`{"id":"c1","choices":[{"delta":{"reasoning_content":"hmm"}}]}`,
	`{"id":"c1","choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}}]}`,
	`{"id":"c1","choices":[{"delta":{"tool_calls":null,"content":""}}]}`,
	`{"id":"c1","choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3}}`,
	`{"id":"c1","choices":[{"delta":{"content":""},"finish_reason":""}]}`,
	// Escapes and unicode.
	`{"choices":[{"delta":{"content":"a\nb\t\"q\" \\ \/ \b\f\r \u00e9 \u20AC \ud83d\ude00"}}]}`,
	`{"choices":[{"delta":{"content":"lone \ud83d and \ude00, \ud83dx, \ud83d\u0041"}}]}`,
	`{"choices":[{"delta":{"content":"é€😀 plain UTF-8"}}]}`,
	"{\"choices\":[{\"delta\":{\"content\":\"bad \xff\xfe UTF-8 \xe2\x82\"}}]}",
	"{\"choices\":[{\"delta\":{\"content\":\"del \x7f is fine\"}}]}",
	"{\"choices\":[{\"delta\":{\"content\":\"tab \t is not\"}}]}",
	// Nulls and missing fields.
	`null`,
	` {} `,
	`{"id":null,"choices":null}`,
	`{"choices":[null,{"delta":null},{"delta":{"content":null,"reasoning_content":null}}]}`,
	`{"choices":[]}`,
	`{"choices":[{}]}`,
	// Several choices.
	`{"id":"c2","choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"reasoning_content":"b"},"finish_reason":"length"}]}`,
	// Names as encoding/json matches them: any case, escaped, folded.
	`{"ID":"up","Choices":[{"DELTA":{"Content":"x","REASONING_CONTENT":"y","Tool_Calls":[]},"Finish_Reason":"stop"}]}`,
	`{"\u0069d":"esc","ch\u006fices":[{"delta":{"cont\u0065nt":"z"}}]}`,
	"{\"choices\":[{\"delta\":{\"reasoning_\u212aontent\":\"kelvin\",\"reasoning_content\u017f\":\"long s\"}}]}",
	"{\"choices\":[{\"delta\":{\"r\u0130asoning_content\":\"dotted I\"}}]}",
	// Repeated members: the last one wins; null leaves a string alone.
	`{"id":"a","id":"b","id":null,"choices":[{"delta":{"content":"1"},"delta":{"reasoning_content":"2"},"finish_reason":"stop","finish_reason":null}]}`,
	`{"choices":[{"delta":{"content":"1","content":null,"tool_calls":[1],"tool_calls":null}}]}`,
	`{"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}},{"delta":{"content":"c"}}],"choices":[{"finish_reason":"stop"}],"choices":[null,{},{},{}]}`,
	`{"choices":null,"choices":[{"delta":{"content":"x"}}]}`,
	// Values the fields cannot hold: the chunk is not read.
	`{"id":5,"choices":[]}`,
	`{"choices":{}}`,
	`{"choices":[1]}`,
	`{"choices":[{"delta":[]}]}`,
	`{"choices":[{"delta":{"content":1}}]}`,
	`{"choices":[{"delta":{"content":true}}]}`,
	`{"choices":[{"finish_reason":0}]}`,
	`[]`,
	`"chunk"`,
	`12`,
	`{"other":[1,2.5,-0.1e+3,true,false,null,{"a":[{}]}],"choices":[{"delta":{"content":"ok"}}]}`,
	// Not JSON: not read.
	``,
	`{`,
	`{"id":"c1"`,
	`{"id":"c1",}`,
	`{"choices":[{"delta":{"content":"a"}},]}`,
	`{"id":"c1"} x`,
	`{"id":"c1"}{}`,
	`{"id":'c1'}`,
	`{"id":"\x"}`,
	`{"id":"\u12"}`,
	`{"n":01}`,
	`{"n":1.}`,
	`{"n":-}`,
	`{"n":1e}`,
	`{"n":tru}`,
	`{"n":nul}`,
	`{"id" "c1"}`,
	`{id:"c1"}`,
	"\x00",
}

func TestChunkScanAgreesWithDecoding(t *testing.T) {
	var s chunkScan
	for _, in := range chunkCases {
		want, got := decodedChunk([]byte(in)), scannedChunk(&s, []byte(in))
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\nscanned %+v\ndecoded %+v", in, got, want)
		}
	}
}

func TestChunkScanReadsText(t *testing.T) {
	var s chunkScan
	in := `{"id":"c\u0031","choices":[{"delta":{"content":"a\nb \u00e9\ud83d\ude00","reasoning_content":"\ud83d!"}}]}`
	if !s.read([]byte(in)) || string(s.id) != "c1" || len(s.choices) != 1 ||
		string(s.choices[0].content) != "a\nb é😀" || string(s.choices[0].reasoning) != "\uFFFD!" {
		t.Fatalf("read %q: id %q choices %+v", in, s.id, s.choices)
	}
}

func TestChunkScanDepth(t *testing.T) {
	var s chunkScan
	for _, depth := range []int{jsontext.MaxDepth, jsontext.MaxDepth + 1} {
		in := `{"x":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
		want, got := decodedChunk([]byte(in)), scannedChunk(&s, []byte(in))
		if !reflect.DeepEqual(got, want) || got.OK != (depth <= jsontext.MaxDepth) {
			t.Errorf("depth %d: scanned %+v, decoded %+v", depth, got, want)
		}
	}
}

func TestChunkScanDoesNotAllocate(t *testing.T) {
	var s chunkScan
	for name, msg := range benchChunks {
		escaped := []byte(strings.Replace(string(msg), `"finish_reason":null`, `"finish_reason":null,"x":"\u00e9\n"`, 1))
		for _, m := range [][]byte{msg, escaped} {
			if n := testing.AllocsPerRun(100, func() { s.read(m) }); n != 0 {
				t.Errorf("%s: %v allocations reading %s", name, n, m)
			}
		}
	}
}

func FuzzChunkScan(f *testing.F) {
	for _, in := range chunkCases {
		f.Add([]byte(in))
	}
	for _, msg := range benchChunks {
		f.Add(msg)
	}
	var s chunkScan
	f.Fuzz(func(t *testing.T, msg []byte) {
		want, got := decodedChunk(msg), scannedChunk(&s, msg)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nscanned %+v\ndecoded %+v", msg, got, want)
		}
		// The relay ends a stream at a chunk that is not JSON, so that
		// must be exactly what encoding/json finds invalid.
		if s.notJSON != !json.Valid(msg) {
			t.Fatalf("%q: notJSON %v, valid %v", msg, s.notJSON, json.Valid(msg))
		}
	})
}

// refCompletion is how the relay read non-streaming answers before the
// scanner.
type refCompletion struct {
	Choices []struct {
		Message struct {
			Content          *string         `json:"content"`
			ReasoningContent *string         `json:"reasoning_content"`
			ToolCalls        json.RawMessage `json:"tool_calls"`
		} `json:"message"`
		Text         *string `json:"text"`
		FinishReason string  `json:"finish_reason"`
	} `json:"choices"`
	Usage        json.RawMessage `json:"usage"`
	WebToolSteps json.RawMessage `json:"web_tool_steps"`
}

// completeBodyDecoded is completeBody as it was, decoding the answer with
// encoding/json: what completeBody must still answer, byte for byte.
func (c *Call) completeBodyDecoded(body []byte) ([]byte, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) < 2 || trimmed[0] != '{' || trimmed[len(trimmed)-1] != '}' {
		return nil, &api.Error{Kind: api.KindUpstream, Code: api.CodeBadWorkerReply,
			Message: "worker " + c.lease.Worker.Name + " answered with something that is not a JSON object"}
	}
	var cb refCompletion
	if err := json.Unmarshal(trimmed, &cb); err != nil {
		return nil, &api.Error{Kind: api.KindUpstream, Code: api.CodeBadWorkerReply, Message: "the worker's answer is not valid JSON", Err: err}
	}
	for _, ch := range cb.Choices {
		m := ch.Message
		content, reasoning := "", ""
		if m.Content != nil {
			content = *m.Content
		}
		if m.ReasoningContent != nil {
			reasoning = *m.ReasoningContent
		}
		if ch.Text != nil {
			c.noteText(&c.first, []byte(*ch.Text), nil, false)
		}
		c.noteText(&c.first, []byte(content), []byte(reasoning), present(m.ToolCalls))
		if ch.FinishReason != "" {
			c.first.finish = ch.FinishReason
		}
	}
	reply := refSvcReply{Worker: c.refSvcWorker(), RequestID: c.req.ID, Timing: c.timing()}
	if c.req.Kind == api.KindChat {
		reply.Notice = c.replyNotice()
		if present(cb.WebToolSteps) {
			reply.WebToolSteps = cb.WebToolSteps
			trimmed = cutStepsDecoded(trimmed)
		}
	}
	var add bytes.Buffer
	if !present(cb.Usage) {
		u, _ := c.reportedUsage()
		b, _ := json.Marshal(refUsage(u))
		add.WriteString(`,"usage":`)
		add.Write(b)
	}
	b, err := json.Marshal(reply)
	if err != nil {
		return nil, err
	}
	add.WriteString(`,"svc":`)
	add.Write(b)
	return splice(trimmed, add.Bytes()), nil
}

// cutStepsDecoded removes the member encoding/json reads as
// web_tool_steps (the last, under any case folding it accepts), walking
// the object with a json.Decoder: from its comma, or from its name and
// through the comma after it when it is the first.
func cutStepsDecoded(obj []byte) []byte {
	skip := func(i int) int {
		for i < len(obj) && (obj[i] == ' ' || obj[i] == '\t' || obj[i] == '\n' || obj[i] == '\r') {
			i++
		}
		return i
	}
	dec := json.NewDecoder(bytes.NewReader(obj))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return obj
	}
	from, to, first := -1, -1, false
	for n := 0; dec.More(); n++ {
		start := skip(int(dec.InputOffset()))
		key, err := dec.Token()
		if err != nil {
			return obj
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return obj
		}
		name, _ := json.Marshal(key)
		var probe struct {
			Steps json.RawMessage `json:"web_tool_steps"`
		}
		if json.Unmarshal([]byte(`{`+string(name)+`:`+string(v)+`}`), &probe) == nil && probe.Steps != nil {
			from, to, first = start, int(dec.InputOffset()), n == 0
		}
	}
	if from < 0 {
		return obj
	}
	if first {
		if i := skip(to); i < len(obj) && obj[i] == ',' {
			to = i + 1
		}
	}
	return append(append([]byte(nil), obj[:from]...), obj[to:]...)
}

// answerCases are answers completeBody must complete as it did.
var answerCases = []string{
	`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"hello","logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3}}`,
	`{"choices":[{"text":"a","text":null},{"Text":"b\ud83d"}]}`,
	string(benchCompletion),
	`{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}`,
	` {"choices":[{"message":{"content":null,"tool_calls":[{"id":"x"}]},"finish_reason":"tool_calls"}],"usage":null} `,
	`{"choices":[{"message":{"content":"{\"a\": 1}","reasoning_content":"\u00e9 \ud83d"},"finish_reason":null}],"usage":{"prompt_tokens":1}}`,
	`{"choices":[{"message":{"content":"a"}},{"message":{"content":"b"},"finish_reason":"length"}]}`,
	`{"Choices":[{"Message":{"CONTENT":"up"}}],"Usage":{},"web_tool_steps":[ {"q": "<a & b>"} ]}`,
	`{"choices":[{"message":{"content":"a","content":null}}],"web_tool_steps":null}`,
	`{ "web_tool_steps" : [{"name":"web_fetch"}] , "choices":[{"message":{"content":"a"}}]}`,
	`{"choices":[{"message":{"content":"a"}}] ,"Web_Tool_Steps":[1]}`,
	`{"web_tool_steps":[1]}`,
	`{"choices":[{"message":{"content":"1"}},{"message":{"content":"2"}}],"choices":[{"finish_reason":"stop"}],"choices":[{},{}]}`,
	`{"object":"embedding","data":[{"embedding":[0.1,-2e-3]}]}`,
	`{}`,
	`{ }`,
	`{"choices":5}`,
	`{"choices":[{"message":{"content":7}}]}`,
	`{"choices":[{"finish_reason":null}]} x}`,
	`{"a":}`,
	`[1]`,
	`"text"`,
}

func TestCompleteBodyAsBefore(t *testing.T) {
	for _, in := range answerCases {
		checkCompleteBody(t, []byte(in))
	}
}

func checkCompleteBody(t *testing.T, body []byte) {
	t.Helper()
	was, wasErr := benchCall().completeBodyDecoded(body)
	got, err := benchCall().completeBody(body)
	if (err == nil) != (wasErr == nil) || err != nil && api.ErrorOf(err).Message != api.ErrorOf(wasErr).Message {
		t.Fatalf("%q: error %v, was %v", body, err, wasErr)
	}
	if !bytes.Equal(got, was) {
		t.Fatalf("%q:\ngot %s\nwas %s", body, got, was)
	}
}

func FuzzCompleteBody(f *testing.F) {
	for _, in := range answerCases {
		f.Add([]byte(in))
	}
	for _, in := range chunkCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkCompleteBody(t, body)
	})
}
