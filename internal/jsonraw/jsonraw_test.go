package jsonraw

import (
	"encoding/json"
	"testing"
)

func TestKindOf(t *testing.T) {
	for raw, want := range map[string]Kind{
		"": Invalid, "  ": Invalid, "x": Invalid, "null": Null, " true": Bool, "false": Bool,
		"-1": Number, "0.5": Number, `"s"`: String, "\n[1]": Array, "{}": Object,
		"\t\r\n {}": Object, " \t": Invalid, "\v1": Invalid,
	} {
		if got := KindOf([]byte(raw)); got != want {
			t.Errorf("KindOf(%q) = %v, want %v", raw, got, want)
		}
	}
}

func TestDecode(t *testing.T) {
	m, ok := DecodeObject([]byte(`{"a":1,"Model":"x","n":null,"a":2}`))
	if !ok || string(m["a"]) != "2" {
		t.Fatalf("object %v %v", m, ok)
	}
	if _, ok := m.Field("model"); ok {
		t.Error("keys fold case")
	}
	if _, ok := m.Field("n"); ok {
		t.Error("null read as sent")
	}
	if v, ok := m.Field("Model"); !ok || string(v) != `"x"` {
		t.Errorf("Model = %s %v", v, ok)
	}
	if _, ok := DecodeObject([]byte(`[1]`)); ok {
		t.Error("an array decoded as an object")
	}
	if a, ok := DecodeArray([]byte(`[1,{"b":2}]`)); !ok || len(a) != 2 || string(a[1]) != `{"b":2}` {
		t.Errorf("array %s %v", a, ok)
	}
	if _, ok := DecodeArray([]byte(`{}`)); ok {
		t.Error("an object decoded as an array")
	}
	if s, ok := DecodeString([]byte(`"\u00e9"`)); !ok || s != "é" {
		t.Errorf("string %q %v", s, ok)
	}
	if _, ok := DecodeString(json.RawMessage(`1`)); ok {
		t.Error("a number decoded as a string")
	}
}
