package jsonraw

import (
	"bytes"
	"encoding/json"
	"reflect"
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

// FuzzDecode holds DecodeObject, DecodeArray and DecodeString to
// json.Unmarshal into the same types: accepted alike, and the same
// members, elements and text; and CheckedObject and CheckedArray, and
// their views, to them on valid JSON.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, ` {"a":1,"a":[2, 3] , "b" : {"c":null}} `, `{"\u00e9\ud800":"x","é":1}`, "{\"\xff\":2}",
		`[1,"two",{"3":[4]},null,true]`, `{"a":1,}`, `[1,]`, `{"a"}`, `{"a":1} x`, `null`, `"s"`,
		`{"messages":[{"role":"user","content":"hi \"there\""}]}`, `{"n":1 , "t":true	,"z":-0.5e3 }`, `[ 1 , null ]`, `"a\u00e9\ud83d\ude00\n"`, "\"\xff\"", `"\ud800"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var wantObj Members
		objErr := json.Unmarshal(b, &wantObj)
		gotObj, ok := DecodeObject(b)
		if KindOf(b) == Object && (objErr == nil) != ok {
			t.Fatalf("%q: DecodeObject ok %v, json.Unmarshal %v", b, ok, objErr)
		}
		if ok && !reflect.DeepEqual(gotObj, wantObj) {
			t.Fatalf("%q: DecodeObject %q, json.Unmarshal %q", b, gotObj, wantObj)
		}
		var wantStr string
		strErr := json.Unmarshal(b, &wantStr)
		gotStr, ok := DecodeString(b)
		if KindOf(b) == String && (strErr == nil) != ok {
			t.Fatalf("%q: DecodeString ok %v, json.Unmarshal %v", b, ok, strErr)
		}
		if ok && gotStr != wantStr {
			t.Fatalf("%q: DecodeString %q, json.Unmarshal %q", b, gotStr, wantStr)
		}
		var wantArr []json.RawMessage
		arrErr := json.Unmarshal(b, &wantArr)
		gotArr, ok := DecodeArray(b)
		if KindOf(b) == Array && (arrErr == nil) != ok {
			t.Fatalf("%q: DecodeArray ok %v, json.Unmarshal %v", b, ok, arrErr)
		}
		if ok && !reflect.DeepEqual(gotArr, wantArr) {
			t.Fatalf("%q: DecodeArray %q, json.Unmarshal %q", b, gotArr, wantArr)
		}
		if !json.Valid(b) {
			return
		}
		// In a checked body the members are skimmed: the same values.
		if got, ok := CheckedObject(b); ok != (KindOf(b) == Object) || !reflect.DeepEqual(got, gotObj) {
			t.Fatalf("%q: CheckedObject %q, %v; DecodeObject %q", b, got, ok, gotObj)
		}
		if got, ok := CheckedArray(b); ok != (KindOf(b) == Array) || !reflect.DeepEqual(got, gotArr) {
			t.Fatalf("%q: CheckedArray %q, %v; DecodeArray %q", b, got, ok, gotArr)
		}
		if got, ok := CheckedObjectView(b); ok != (KindOf(b) == Object) || !reflect.DeepEqual(got, gotObj) {
			t.Fatalf("%q: CheckedObjectView %q, %v; DecodeObject %q", b, got, ok, gotObj)
		}
		if got, ok := CheckedArrayView(b); ok != (KindOf(b) == Array) || !reflect.DeepEqual(got, gotArr) {
			t.Fatalf("%q: CheckedArrayView %q, %v; DecodeArray %q", b, got, ok, gotArr)
		}
		// Fields hold the same members, after those already in the list,
		// which a failed read leaves as they were.
		kept := Fields{{Name: []byte("kept"), Value: json.RawMessage(`1`)}}
		fields, ok := AppendFields(kept, b)
		if ok != (KindOf(b) == Object) || len(fields) < 1 || string(fields[0].Name) != "kept" || !ok && len(fields) != 1 {
			t.Fatalf("%q: AppendFields %q, %v", b, fields, ok)
		}
		if ok {
			fields = fields[1:]
			for k, v := range gotObj {
				if got, found := fields.Get(k); !found || !bytes.Equal(got, v) {
					t.Fatalf("%q: Fields.Get(%q) = %q, %v; DecodeObject has %q", b, k, got, found, v)
				}
				got, found := fields.Field(k)
				want, wantFound := gotObj.Field(k)
				if found != wantFound || !bytes.Equal(got, want) {
					t.Fatalf("%q: Fields.Field(%q) = %q, %v; Members.Field %q, %v", b, k, got, found, want, wantFound)
				}
			}
			for _, f := range fields {
				if _, in := gotObj[string(f.Name)]; !in {
					t.Fatalf("%q: Fields has %q, which DecodeObject does not", b, f.Name)
				}
			}
		}
	})
}

// A reader's objects share one list: each keeps its own members as later
// objects are read and the list grows, and a value that is not an object
// reads as none.
func TestFieldReader(t *testing.T) {
	var r FieldReader
	var objs []Fields
	for i := range 40 {
		f, ok := r.Read([]byte(`{"i":` + string(rune('0'+i%10)) + `,"x":[1]}`))
		if !ok || len(f) != 2 {
			t.Fatalf("read %d: %q, %v", i, f, ok)
		}
		objs = append(objs, f)
		if f, ok := r.Read([]byte(`[1]`)); ok || f != nil {
			t.Fatalf("an array read as %q, %v", f, ok)
		}
	}
	for i, f := range objs {
		if v, _ := f.Get("i"); string(v) != string(rune('0'+i%10)) || cap(f) != 2 {
			t.Fatalf("object %d now %q (cap %d)", i, f, cap(f))
		}
	}
}
