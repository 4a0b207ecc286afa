package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestOptional(t *testing.T) {
	var p struct {
		A Optional[int]    `json:"a,omitzero"`
		B Optional[int]    `json:"b,omitzero"`
		C Optional[string] `json:"c,omitzero"`
	}
	if err := json.Unmarshal([]byte(`{"a": 3, "b": null}`), &p); err != nil {
		t.Fatal(err)
	}
	if !p.A.Set || p.A.Null || p.A.Value != 3 || *p.A.Ptr() != 3 {
		t.Errorf("a = %+v", p.A)
	}
	if !p.B.Set || !p.B.Null || p.B.Ptr() != nil {
		t.Errorf("b = %+v", p.B)
	}
	if p.C.Set {
		t.Errorf("c = %+v", p.C)
	}
	out, _ := json.Marshal(p)
	if string(out) != `{"a":3,"b":null}` {
		t.Errorf("marshal = %s", out)
	}
}

func TestInvalidSummary(t *testing.T) {
	e := Invalid(FieldError{Field: "a", Message: "bad"})
	if e.HTTPStatus() != 422 || e.Message != "Invalid request: a: bad" || e.ErrorType() != TypeInvalidRequest {
		t.Fatalf("%+v", e)
	}
	var v Validator
	if v.Err() != nil {
		t.Fatal("empty validator reports an error")
	}
}

func TestTypeForStatus(t *testing.T) {
	for status, want := range map[int]string{400: TypeInvalidRequest, 401: TypeAuthentication, 403: TypePermission,
		404: TypeNotFound, 409: TypeConflict, 422: TypeInvalidRequest, 429: TypeRateLimit, 500: TypeServer,
		501: TypeNotSupported, 502: TypeUpstream, 503: TypeServiceUnavailable, 504: TypeTimeout, 507: TypeInsufficientMemory} {
		if got := TypeForStatus(status); got != want {
			t.Errorf("TypeForStatus(%d) = %s, want %s", status, got, want)
		}
	}
}

// Every kind is answered with a status and, unless it names its own, the
// type a client expects of that status.
func TestKindTable(t *testing.T) {
	want := map[Kind]int{KindInternal: 500, KindInvalidRequest: 400, KindValidation: 422, KindUnauthenticated: 401,
		KindPaymentRequired: 402, KindForbidden: 403, KindPlanRequired: 403, KindNotFound: 404, KindMethodNotAllowed: 405,
		KindConflict: 409, KindTooLarge: 413, KindHeadersTooLarge: 431, KindRateLimited: 429, KindCapacity: 429,
		KindClientGone: 499, KindNotImplemented: 501, KindUpstream: 502, KindUnavailable: 503, KindTimeout: 504,
		KindInsufficientMemory: 507, KindRequestTimeout: 408, KindHTTPVersion: 505, KindRelayed: 502}
	for k := KindInternal; k <= KindRelayed; k++ {
		status, ok := want[k]
		if !ok {
			t.Fatalf("kind %d (%s) is not in the test's table", k, k)
		}
		e := &Error{Kind: k}
		if e.HTTPStatus() != status {
			t.Errorf("%s: status %d, want %d", k, e.HTTPStatus(), status)
		}
		typ := TypeForStatus(status)
		if k == KindPlanRequired {
			typ = TypePlanRequired
		}
		if e.ErrorType() != typ {
			t.Errorf("%s: type %s, want %s", k, e.ErrorType(), typ)
		}
		if k.String() == "" || (k != KindInternal && k.String() == KindInternal.String()) {
			t.Errorf("kind %d has no name of its own", k)
		}
	}
}

func TestRelayed(t *testing.T) {
	for _, tt := range []struct {
		in, status int
		typ        string
	}{{507, 507, TypeInsufficientMemory}, {418, 418, TypeInvalidRequest}, {200, 502, TypeUpstream}, {0, 502, TypeUpstream}, {600, 502, TypeUpstream}} {
		e := Relayed(tt.in, "", "", "m")
		if e.HTTPStatus() != tt.status || e.ErrorType() != tt.typ || e.Kind != KindRelayed {
			t.Errorf("Relayed(%d): %d %s %s, want %d %s", tt.in, e.HTTPStatus(), e.ErrorType(), e.Kind, tt.status, tt.typ)
		}
	}
	if e := Relayed(400, "context_length_exceeded", "", "m"); e.ErrorType() != "context_length_exceeded" || e.ServerFault() {
		t.Errorf("%+v", e)
	}
	if e := Relayed(503, "", "", "m"); !e.ServerFault() {
		t.Errorf("a relayed 503 is not a server fault")
	}
}

func TestPlanRequiredIsNested(t *testing.T) {
	if e := PlanRequired("upgrade"); !e.Nested() || e.HTTPStatus() != 403 || e.ErrorType() != TypePlanRequired {
		t.Fatalf("%+v", e)
	}
	if e := Forbidden("no"); e.Nested() {
		t.Fatal("a plain 403 is nested")
	}
	noHolder := &Error{Kind: KindUnavailable, Code: CodeNoPrivateInferenceWorker}
	if !noHolder.Nested() || noHolder.ErrorType() != TypeServiceUnavailable {
		t.Fatalf("no_private_inference_worker: nested %v, type %q", noHolder.Nested(), noHolder.ErrorType())
	}
}

// An install report keeps the shape workers have always sent, the install
// as the event's metadata, so workers and gateways of either release read
// each other's.
func TestModelInstallReport(t *testing.T) {
	sent := `{"event_type":"model_install","detail":"installing m: 2%","metadata":{"model":"m","state":"progress","total":150,"completed":3}}`
	var r WorkerEventReport
	if err := json.Unmarshal([]byte(sent), &r); err != nil {
		t.Fatal(err)
	}
	want := ModelInstall{Model: "m", State: InstallProgress, Total: 150, Completed: 3}
	if r.Install == nil || *r.Install != want {
		t.Fatalf("install %+v", r.Install)
	}
	if out, _ := json.Marshal(r); string(out) != sent {
		t.Errorf("marshal = %s", out)
	}
	meta, _ := json.Marshal(want.Metadata())
	if string(meta) != `{"completed":3,"model":"m","state":"progress","total":150}` {
		t.Errorf("metadata = %s", meta)
	}
	if m := (ModelInstall{Model: "m", State: InstallCompleted}).Metadata(); len(m) != 2 {
		t.Errorf("a completed install's metadata %v", m)
	}
}

// An organisation's request rate limit is its own setting, else its
// plan's default; an organisation stored before the setting existed has
// none of its own.
func TestRequestsPerMinute(t *testing.T) {
	n := func(v int) *int { return &v }
	tests := []struct {
		name    string
		plan    Plan
		setting *int
		want    int
	}{
		{"free, default", PlanFree, nil, 600},
		{"pro, default", PlanPro, nil, 0},
		{"enterprise, default", PlanEnterprise, nil, 0},
		{"free, set", PlanFree, n(6), 6},
		{"free, no limit", PlanFree, n(0), 0},
		{"pro, set", PlanPro, n(1200), 1200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Organization{Plan: tt.plan, Settings: OrgSettings{RequestsPerMinute: tt.setting}}
			if got := o.RequestsPerMinute(); got != tt.want {
				t.Errorf("RequestsPerMinute() = %d, want %d", got, tt.want)
			}
		})
	}
	var old Organization
	if err := json.Unmarshal([]byte(`{"plan":"free","settings":{"require_e2e":true}}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.Settings.RequestsPerMinute != nil || old.RequestsPerMinute() != 600 {
		t.Errorf("stored before the setting: %v, limit %d", old.Settings.RequestsPerMinute, old.RequestsPerMinute())
	}
	if b, _ := json.Marshal(OrgSettings{}); !strings.Contains(string(b), `"requests_per_minute":null`) {
		t.Errorf("settings = %s, want requests_per_minute null", b)
	}
}
