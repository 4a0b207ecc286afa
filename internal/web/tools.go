package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The tools' names, as the model calls them and steps report them.
const (
	ToolFetch  = "web_fetch"
	ToolSearch = "web_search"
)

// Tools are the web tools a worker runs. A nil Searcher offers web_fetch
// alone.
type Tools struct {
	Fetcher  *Fetcher
	Searcher Searcher
}

// definitions are the tools as a chat request's tools offer them.
func (t *Tools) definitions() []json.RawMessage {
	defs := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"web_fetch",` +
		`"description":"Fetch a web page by its URL and read it as text. Use it when the user gives a URL or the answer is on a known page.",` +
		`"parameters":{"type":"object","properties":{"url":{"type":"string","description":"the page's http or https URL"}},"required":["url"]}}}`)}
	if t.Searcher != nil {
		defs = append(defs, json.RawMessage(`{"type":"function","function":{"name":"web_search",`+
			`"description":"Search the web. Returns titles, URLs and snippets of the best matches; fetch a result's URL to read it whole.",`+
			`"parameters":{"type":"object","properties":{"query":{"type":"string","description":"what to search for"}},"required":["query"]}}}`))
	}
	return defs
}

// has says whether name is one of the tools offered.
func (t *Tools) has(name string) bool {
	return name == ToolFetch || (name == ToolSearch && t.Searcher != nil)
}

// What the model is given of a search hit, and of a page's title, is cut
// to these lengths in characters: a search backend's answer is the
// backend's to size, and one hit of a megabyte would fill the model's
// context, failing the chat, where a page's text is cut already
// (Fetcher.MaxChars).
const (
	maxTitleChars   = 300
	maxURLChars     = 2048
	maxSnippetChars = 1000
)

// run runs one call and returns what the model is given back.
func (t *Tools) run(ctx context.Context, name, arguments string) (string, error) {
	switch name {
	case ToolFetch:
		var args struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal([]byte(arguments), &args); err != nil || args.URL == "" {
			return "", errors.New(`the arguments must be a JSON object with a "url" string`)
		}
		page, err := t.Fetcher.Fetch(ctx, args.URL)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		if page.Title != "" {
			fmt.Fprintf(&b, "Title: %s\n", Cut(page.Title, maxTitleChars))
		}
		fmt.Fprintf(&b, "URL: %s\n\n%s", page.URL, page.Text)
		return b.String(), nil
	case ToolSearch:
		if t.Searcher == nil {
			break
		}
		var args struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal([]byte(arguments), &args); err != nil || strings.TrimSpace(args.Query) == "" {
			return "", errors.New(`the arguments must be a JSON object with a "query" string`)
		}
		hits, err := t.Searcher.Search(ctx, args.Query)
		if err != nil {
			return "", err
		}
		if len(hits) == 0 {
			return "No results.", nil
		}
		var b strings.Builder
		for i, h := range hits {
			if i > 0 {
				b.WriteString("\n\n")
			}
			fmt.Fprintf(&b, "%d. %s\n%s", i+1, Cut(h.Title, maxTitleChars), Cut(h.URL, maxURLChars))
			if h.Snippet != "" {
				b.WriteString("\n" + Cut(h.Snippet, maxSnippetChars))
			}
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("there is no tool %q", name)
}
