package web

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHTMLText(t *testing.T) {
	tests := []struct {
		name, html, title, text string
		max                     int
	}{
		{name: "empty", html: "", text: ""},
		{name: "plain text", html: "just  some\n\ttext ", text: "just some text"},
		{name: "title and body",
			html:  "<html><head><title> The  Page </title><meta charset=utf-8><style>p{color:red}</style></head><body><p>Hello</p></body></html>",
			title: "The Page", text: "Hello"},
		{name: "scripts and styles dropped",
			html: "<p>before</p><script>var x = '<p>not text</p>';</script><style>.a{}</style><noscript>enable js</noscript><p>after</p>",
			text: "before\n\nafter"},
		{name: "nav, footer, aside and forms dropped",
			html: "<nav><a href=/>Home</a><nav>inner</nav> still nav</nav><main><h1>Title</h1><p>Body text.</p></main><aside>ad</aside><form><input><button>Go</button></form><footer>© 2024</footer>",
			text: "# Title\n\nBody text."},
		{name: "headings marked by level",
			html: "<h1>One</h1><h2>Two</h2><h3>Three <em>it</em></h3><p>x</p>",
			text: "# One\n\n## Two\n\n### Three it\n\nx"},
		{name: "links keep their text",
			html: `<p>Read <a href="https://example.com/a">the docs</a>, then <a href="/b">more</a>.</p>`,
			text: "Read the docs, then more."},
		{name: "inline tags join words",
			html: "<p>foo<b>bar</b> baz<i> qux</i></p>",
			text: "foobar baz qux"},
		{name: "lists",
			html: "<ul><li>one</li><li>two <b>2</b></li></ul><ol><li>three</ol>",
			text: "- one\n- two 2\n\n- three"},
		{name: "line breaks and divs",
			html: "<div>a<br>b</div><div>c</div>",
			text: "a\nb\nc"},
		{name: "table cells spaced",
			html: "<table><tr><th>k</th><th>v</th></tr><tr><td>a</td><td>1</td></tr></table>",
			text: "k v\na 1"},
		{name: "image alt text",
			html: `<p>see<img src=x.png alt="a cat">here</p>`,
			text: "see a cat here"},
		{name: "entities decoded",
			html: "<p>fish &amp; chips &lt;3 &eacute;t&#233;</p>",
			text: "fish & chips <3 été"},
		{name: "unclosed tags",
			html: "<p>one<p>two<div>three",
			text: "one\n\ntwo\nthree"},
		{name: "comments and doctype dropped",
			html: "<!DOCTYPE html><!-- hidden --><p>shown</p>",
			text: "shown"},
		{name: "svg dropped, self-closing children too",
			html: "<p>a</p><svg><path d='M0'/><text>svg text</text></svg><p>b</p>",
			text: "a\n\nb"},
		{name: "blank lines collapse",
			html: "<p>a</p>\n\n<p></p><div>  </div>\n<p>b</p>",
			text: "a\n\nb"},
		{name: "cut to length",
			html: "<p>alpha beta gamma delta</p>", max: 12,
			text: "alpha beta…"},
		{name: "cut counts characters not bytes",
			html: "<p>ééééé</p>", max: 4,
			text: "ééé…"},
		{name: "short enough is not cut",
			html: "<p>abc</p>", max: 3,
			text: "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			title, text := HTMLText(strings.NewReader(tt.html), tt.max)
			if title != tt.title || text != tt.text {
				t.Errorf("HTMLText(%q) =\n title %q\n text  %q\nwant\n title %q\n text  %q", tt.html, title, text, tt.title, tt.text)
			}
		})
	}
}

func FuzzHTMLText(f *testing.F) {
	for _, s := range []string{
		"", "<p>a</p>", "<script>x</script>y", "<nav><nav></nav>", "<h1>a<li>b</h1>",
		"<title>t</title><p>x  y</p>", "a\xffb", "<img alt='\x00'>", "<table><td>1<td>2",
	} {
		f.Add(s, 10)
	}
	f.Fuzz(func(t *testing.T, doc string, max int) {
		max %= 1000
		if max < 0 {
			max = -max
		}
		title, text := HTMLText(strings.NewReader(doc), max)
		if !utf8.ValidString(text) || !utf8.ValidString(title) {
			t.Fatalf("invalid UTF-8: %q %q", title, text)
		}
		if max > 0 && utf8.RuneCountInString(text) > max {
			t.Fatalf("text of %d characters, cap %d", utf8.RuneCountInString(text), max)
		}
		if strings.Contains(text, "\n\n\n") || strings.Contains(text, "  ") {
			t.Fatalf("whitespace not collapsed: %q", text)
		}
		if text != strings.TrimSpace(text) && !strings.HasSuffix(text, "…") {
			t.Fatalf("untrimmed: %q", text)
		}
	})
}

// A page's title is cut where docs/inference.md says, as web_search's
// titles are.
func TestHTMLTitleCut(t *testing.T) {
	long := strings.Repeat("word ", 100) // 500 characters
	title, _ := HTMLText(strings.NewReader("<title>"+long+"</title><p>x</p>"), 100)
	if n := utf8.RuneCountInString(title); n != maxTitleChars {
		t.Fatalf("title of %d characters, want %d: %q", n, maxTitleChars, title)
	}
}
