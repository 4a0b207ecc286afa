package money

import (
	"encoding/json"
	"errors"
	"math"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want GBP
		err  error
	}{
		{"0", 0, nil},
		{"12", 1200, nil},
		{"12.5", 1250, nil},
		{"12.05", 1205, nil},
		{".5", 50, nil},
		{"-0.25", -25, nil},
		{"+3", 300, nil},
		{" 7.10 ", 710, nil},
		{"92233720368547758.07", math.MaxInt64, nil},
		{"92233720368547758.08", 0, ErrRange},
		{"99999999999999999999", 0, ErrRange},
		{"12.345", 0, ErrSyntax},
		{"12.", 0, ErrSyntax},
		{".", 0, ErrSyntax},
		{"", 0, ErrSyntax},
		{"-", 0, ErrSyntax},
		{"1e2", 0, ErrSyntax},
		{"1,5", 0, ErrSyntax},
		{"--1", 0, ErrSyntax},
		{"NaN", 0, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Parse(%q) error = %v, want %v", tt.in, err, tt.err)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	tests := []struct {
		in   GBP
		want string
	}{
		{0, "0.00"},
		{5, "0.05"},
		{-5, "-0.05"},
		{1250, "12.50"},
		{math.MinInt64, "-92233720368547758.08"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("GBP(%d).String() = %q, want %q", int64(tt.in), got, tt.want)
		}
	}
}

func TestJSON(t *testing.T) {
	var v struct {
		A GBP  `json:"a"`
		B GBP  `json:"b"`
		C *GBP `json:"c"`
	}
	if err := json.Unmarshal([]byte(`{"a": 10.1, "b": "3", "c": null}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != 1010 || v.B != 300 || v.C != nil {
		t.Fatalf("got %+v", v)
	}
	out, _ := json.Marshal(v)
	if string(out) != `{"a":10.10,"b":3.00,"c":null}` {
		t.Fatalf("marshal = %s", out)
	}
	if err := json.Unmarshal([]byte(`{"a": 0.001}`), &v); err == nil {
		t.Fatal("three decimals accepted")
	}
}

func TestAdd(t *testing.T) {
	if _, err := GBP(math.MaxInt64).Add(1); !errors.Is(err, ErrRange) {
		t.Fatalf("overflow not detected: %v", err)
	}
	if _, err := GBP(math.MinInt64).Add(-1); !errors.Is(err, ErrRange) {
		t.Fatalf("underflow not detected: %v", err)
	}
	if s, err := GBP(150).Add(-200); err != nil || s != -50 {
		t.Fatalf("150 + -200 = %d, %v", s, err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "12.5", "-0.01", ".5", "1e3", "92233720368547758.07"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err != nil {
			return
		}
		// Whatever parses must format back to a string that parses to the same value.
		back, err := Parse(v.String())
		if err != nil || back != v {
			t.Fatalf("round trip of %q: %v -> %q -> %v, %v", s, int64(v), v.String(), int64(back), err)
		}
	})
}
