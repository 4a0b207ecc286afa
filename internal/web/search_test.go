package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestSearXNG(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Path + "?" + r.URL.RawQuery
		if r.URL.Query().Get("q") == "broken" {
			http.Error(w, "json format disabled", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"query":"otters","results":[
			{"title":"Sea  otter","url":"https://en.example.org/otter","content":"The sea otter\nis a marine mammal.","engine":"x"},
			{"title":"No URL","url":""},
			{"title":"Otter facts","url":"https://facts.example/otters","content":""},
			{"title":"Third","url":"https://third.example/"}
		],"answers":[]}`))
	}))
	defer srv.Close()
	s, err := NewSearcher("searxng=" + srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	s.(*SearXNG).MaxResults = 2
	hits, err := s.Search(context.Background(), " sea otters & co ")
	if err != nil {
		t.Fatal(err)
	}
	if got != "/search?format=json&q=sea+otters+%26+co" {
		t.Errorf("request = %s", got)
	}
	want := []SearchResult{
		{Title: "Sea otter", URL: "https://en.example.org/otter", Snippet: "The sea otter is a marine mammal."},
		{Title: "Otter facts", URL: "https://facts.example/otters"},
	}
	if !reflect.DeepEqual(hits, want) {
		t.Errorf("hits = %+v", hits)
	}
	if _, err := s.Search(context.Background(), "broken"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a 403 = %v", err)
	}
	if _, err := s.Search(context.Background(), "  "); err == nil {
		t.Error("an empty query was searched")
	}
}

func TestSearXNGNotJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("<html>results</html>"))
	}))
	defer srv.Close()
	s := &SearXNG{BaseURL: srv.URL}
	if _, err := s.Search(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "JSON") {
		t.Errorf("Search = %v", err)
	}
	srv.Close()
	if _, err := s.Search(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("Search of a closed server = %v", err)
	}
}

func TestNewSearcher(t *testing.T) {
	for _, bad := range []string{"", "searxng", "searxng=", "searxng=ftp://x", "google=https://x"} {
		if _, err := NewSearcher(bad); err == nil {
			t.Errorf("NewSearcher(%q) accepted", bad)
		}
	}
}
