// Package web provides the web tools a worker runs for a model: web_fetch
// (a page as readable text, fetched through netguard) and web_search (a
// search backend such as SearXNG), and the loop that offers them to an
// engine, runs its calls and feeds the results back until it answers.
package web

import (
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// skipped are elements whose text is not the page's content: code,
// styling, and the site's chrome around the article.
func skipped(a atom.Atom) bool {
	switch a {
	case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Svg, atom.Math,
		atom.Nav, atom.Footer, atom.Aside, atom.Form, atom.Iframe, atom.Object,
		atom.Canvas, atom.Select, atom.Button, atom.Head:
		return true
	}
	return false
}

// block says how an element breaks text: 0 inline, 1 a line of its own,
// 2 a paragraph of its own.
func block(a atom.Atom) int {
	switch a {
	case atom.P, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6, atom.Blockquote,
		atom.Pre, atom.Table, atom.Ul, atom.Ol, atom.Dl, atom.Section, atom.Article,
		atom.Main, atom.Header, atom.Figure, atom.Hr:
		return 2
	case atom.Br, atom.Div, atom.Li, atom.Tr, atom.Dt, atom.Dd, atom.Figcaption,
		atom.Caption, atom.Address, atom.Details, atom.Summary:
		return 1
	}
	return 0
}

func headingLevel(a atom.Atom) int {
	switch a {
	case atom.H1:
		return 1
	case atom.H2:
		return 2
	case atom.H3:
		return 3
	case atom.H4:
		return 4
	case atom.H5:
		return 5
	case atom.H6:
		return 6
	}
	return 0
}

// HTMLText turns an HTML document into the text a reader sees: headings
// (marked with #), paragraphs, list items (marked with -), table cells and
// links' text, without scripts, styles, navigation and forms, whitespace
// collapsed, cut to maxChars characters (0: no cut; a cut text ends in
// "…"). It also returns the document's title. Broken HTML is read as a
// browser would read it, as far as a tokenizer can.
func HTMLText(r io.Reader, maxChars int) (title, text string) {
	z := html.NewTokenizer(r)
	var w textWriter
	var titleText strings.Builder
	skip := 0 // depth inside skipped elements
	inTitle := false
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			return Cut(collapse(titleText.String()), maxTitleChars), w.finish(maxChars)
		case html.TextToken:
			switch {
			case inTitle:
				titleText.Write(z.Text())
			case skip == 0:
				w.text(string(z.Text()))
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			if a == atom.Title && tt == html.StartTagToken {
				inTitle = true
				continue
			}
			if skipped(a) {
				if tt == html.StartTagToken && a != atom.Head {
					skip++
				}
				continue
			}
			if skip > 0 {
				continue
			}
			if n := block(a); n > 0 {
				w.brk(n)
			}
			switch {
			case headingLevel(a) > 0:
				w.prefix = strings.Repeat("#", headingLevel(a)) + " "
			case a == atom.Li:
				w.prefix = "- "
			case a == atom.Td || a == atom.Th:
				w.text(" ")
			case a == atom.Img:
				// An image's alt text stands in for it.
				for {
					k, v, more := z.TagAttr()
					if string(k) == "alt" {
						w.text(" " + string(v) + " ")
					}
					if !more {
						break
					}
				}
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			switch {
			case a == atom.Title:
				inTitle = false
			case skipped(a):
				if skip > 0 && a != atom.Head {
					skip--
				}
			case skip == 0 && block(a) > 0:
				w.brk(block(a))
			}
		}
	}
}

// textWriter collects text with whitespace collapsed: runs of spaces
// become one, and breaks between blocks one newline or one blank line.
type textWriter struct {
	b       strings.Builder
	pending int    // break owed before the next text: 0, 1 or 2 newlines
	space   bool   // a space owed before the next text
	prefix  string // a heading's or list item's mark, owed at the start of its line
}

func (w *textWriter) brk(n int) {
	w.pending = max(w.pending, n)
	w.space = false
}

func (w *textWriter) text(s string) {
	if s != "" && unicode.IsSpace(firstRune(s)) {
		w.space = true
	}
	fields := strings.FieldsFunc(s, unicode.IsSpace)
	for i, f := range fields {
		if i > 0 {
			w.space = true
		}
		w.word(f)
	}
	if len(fields) > 0 {
		// Text that ends mid-word continues in the next text token
		// ("foo<b>bar</b>" is one word).
		w.space = unicode.IsSpace(lastRune(s))
	}
}

func (w *textWriter) word(f string) {
	switch {
	case w.b.Len() == 0:
	case w.pending > 0:
		w.b.WriteString(strings.Repeat("\n", w.pending))
	case w.space:
		w.b.WriteByte(' ')
	}
	if w.prefix != "" {
		if w.b.Len() == 0 || w.pending > 0 {
			w.b.WriteString(w.prefix)
		}
		w.prefix = ""
	}
	w.pending, w.space = 0, false
	w.b.WriteString(f)
}

func (w *textWriter) finish(maxChars int) string {
	return Cut(w.b.String(), maxChars)
}

func lastRune(s string) rune {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r
}

func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}

// collapse joins whitespace runs into single spaces and trims the ends.
func collapse(s string) string {
	return strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
}

// Cut shortens s to at most maxChars characters, the last one "…" when
// anything was cut; 0 leaves s whole. Invalid UTF-8 is replaced, so what
// is cut is always text.
func Cut(s string, maxChars int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if maxChars <= 0 || utf8.RuneCountInString(s) <= maxChars {
		return s
	}
	n := 0
	for i := range s {
		if n == maxChars-1 {
			return strings.TrimRightFunc(s[:i], unicode.IsSpace) + "…"
		}
		n++
	}
	return s
}
