package web

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// SearchResult is one hit of a web search.
type SearchResult struct {
	Title   string
	URL     string
	Snippet string
}

// Searcher is a web search backend. Error messages are meant for the
// model that asked.
type Searcher interface {
	Search(ctx context.Context, query string) ([]SearchResult, error)
}

// DefaultSearchResults is how many hits a search returns when its backend
// does not say.
const DefaultSearchResults = 8

// NewSearcher makes the backend an operator names as KIND=URL; only
// searxng=URL so far.
func NewSearcher(spec string) (Searcher, error) {
	kind, rawURL, ok := strings.Cut(spec, "=")
	if !ok || rawURL == "" {
		return nil, fmt.Errorf("web search backend %q: want KIND=URL, e.g. searxng=http://127.0.0.1:8888", spec)
	}
	switch kind {
	case "searxng":
		u, err := url.Parse(rawURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("web search backend %q: not an http(s) URL", spec)
		}
		return &SearXNG{BaseURL: rawURL}, nil
	}
	return nil, fmt.Errorf("web search backend %q: unknown kind %q (known: searxng)", spec, kind)
}

// SearXNG searches through a SearXNG instance's JSON API, which the
// instance must enable (search.formats in its settings.yml). The instance
// is the operator's own, often on the LAN, so it is reached without the
// guard web_fetch goes through.
type SearXNG struct {
	BaseURL string
	// Client makes the requests; nil means one with Timeout.
	Client *http.Client
	// MaxResults bounds the hits returned; 0 means DefaultSearchResults.
	MaxResults int
	// Timeout bounds a search; 0 means DefaultFetchTimeout.
	Timeout time.Duration
}

// searxngReply is the part of SearXNG's /search?format=json answer a
// search uses.
type searxngReply struct {
	Results []struct {
		Title   string `json:"title"`
		URL     string `json:"url"`
		Content string `json:"content"`
	} `json:"results"`
}

func (s *SearXNG) Search(ctx context.Context, query string) ([]SearchResult, error) {
	query = strings.TrimSpace(query)
	if query == "" {
		return nil, errors.New("the query is empty")
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.Timeout, DefaultFetchTimeout))
	defer cancel()
	u := strings.TrimRight(s.BaseURL, "/") + "/search?" + url.Values{"q": {query}, "format": {"json"}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("the search backend's URL is not valid: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errors.New("the search backend timed out")
		}
		return nil, errors.New("the search backend is unreachable")
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the search backend answered %s", resp.Status)
	}
	var reply searxngReply
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&reply); err != nil {
		return nil, errors.New("the search backend's answer is not SearXNG's JSON")
	}
	n := cmp.Or(s.MaxResults, DefaultSearchResults)
	out := make([]SearchResult, 0, min(n, len(reply.Results)))
	for _, r := range reply.Results {
		if len(out) == n {
			break
		}
		if r.URL == "" {
			continue
		}
		out = append(out, SearchResult{Title: collapse(r.Title), URL: r.URL, Snippet: collapse(r.Content)})
	}
	return out, nil
}
