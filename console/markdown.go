package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	extast "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/renderer"
	gmtext "github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Memory documents are shown as Markdown turned into HTML. Their text
// comes from a model and from web pages: it is data, never markup. So the
// renderer is goldmark in its safe mode (no html.WithUnsafe), with the
// GitHub extensions (tables, strikethrough, task lists, bare links) and
// these rules on top, in safeRenderer:
//
//   - raw HTML, inline or a block, is shown as text (escaped), never
//     passed through: "<script>" reads as "<script>";
//   - a link, an autolink or a bare link is a link only when its address
//     is http, https, mailto, or has no scheme (a path or #fragment):
//     javascript:, data:, vbscript: and every other scheme, however
//     spelled (case, entities, control characters), leave the link's text
//     and no link;
//   - every link has rel="noopener noreferrer nofollow";
//   - an image is never loaded: it is a link to its address (same rules)
//     whose text is its alt text (the page's CSP, img-src 'self' data:,
//     would refuse another origin's image anyway);
//   - no element gets an id (headings get none: a document could
//     otherwise clobber the page's own ids) and no style attribute (the
//     CSP forbids inline style; table alignment is the align attribute).
var md = goldmark.New(
	goldmark.WithExtensions(extension.Linkify, extension.Strikethrough, extension.TaskList,
		extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute))),
	goldmark.WithRendererOptions(renderer.WithNodeRenderers(util.Prioritized(safeRenderer{}, 100))),
)

// linkRel is the rel of every link a document makes.
const linkRel = "noopener noreferrer nofollow"

// The bounds of what a document may render to. A table's every row is
// padded to its header's columns, so a 32 KiB document with a wide header
// and thousands of empty rows would make hundreds of MB of HTML; deep
// nesting makes as many open and close tags as characters. A document
// past one of these bounds, or whose HTML would pass max(outMin, outPer ×
// its size), is shown as its source instead (escaped, in a <pre>).
const (
	maxTableColumns = 64
	maxTableCells   = 10_000
	maxDepth        = 32
	outMin          = 1 << 20
	outPer          = 16
)

// markdown renders text as safe HTML (see md) within the bounds above;
// past them, or on a failure of the renderer, it is the text escaped in a
// <pre>, with a note saying why.
func markdown(text string) template.HTML {
	return markdownCapped(text, max(outMin, outPer*len(text)))
}

// markdownCapped is markdown with its output capped at limit bytes.
func markdownCapped(text string, limit int) template.HTML {
	if why := tooBigSource(text); why != "" {
		return asSource(text, why)
	}
	src := []byte(text)
	doc := md.Parser().Parse(gmtext.NewReader(src))
	if why := tooBig(doc); why != "" {
		return asSource(text, why)
	}
	out := &cappedWriter{limit: limit}
	if err := md.Renderer().Render(out, src, doc); err != nil || out.over {
		if out.over {
			return asSource(text, fmt.Sprintf("its HTML would be more than %d bytes", limit))
		}
		return asSource(text, "it could not be rendered")
	}
	return template.HTML(out.buf.String()) //nolint:gosec // the safe renderer's output: see md
}

// asSource is text escaped in a <pre>, after a note saying why it is not
// rendered.
func asSource(text, why string) template.HTML {
	return template.HTML(`<p class="muted md-note">This document is shown as its source: ` + template.HTMLEscapeString(why) + //nolint:gosec // escaped
		`.</p><pre class="text">` + template.HTMLEscapeString(text) + "</pre>")
}

// tooBigSource says why text may not even be parsed, or "": goldmark's
// parser makes every cell of a table, padding each row to the header's
// columns, so a line with more than maxTableColumns+1 pipes and a dash
// (a table's delimiter row may be such a line) is refused before the
// parse, as is a line opening more than maxDepth block quotes.
func tooBigSource(text string) string {
	for line := range strings.Lines(text) {
		if strings.Count(line, "|") > maxTableColumns+1 && strings.Contains(line, "-") {
			return fmt.Sprintf("a table has more than %d columns", maxTableColumns)
		}
		lead := line[:len(line)-len(strings.TrimLeft(line, "> \t"))]
		if strings.Count(lead, ">") > maxDepth {
			return fmt.Sprintf("it nests more than %d levels deep", maxDepth)
		}
	}
	return ""
}

// tooBig says why doc may not be rendered (a table too wide or with too
// many cells, nesting too deep), or "".
func tooBig(doc ast.Node) string {
	cells, depth, why := 0, -1, "" // the document itself is at depth 0
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			depth--
			return ast.WalkContinue, nil
		}
		depth++
		switch {
		case depth > maxDepth:
			why = fmt.Sprintf("it nests more than %d levels deep", maxDepth)
		case n.Kind() == extast.KindTable && len(n.(*extast.Table).Alignments) > maxTableColumns:
			why = fmt.Sprintf("a table has %d columns, more than %d", len(n.(*extast.Table).Alignments), maxTableColumns)
		case n.Kind() == extast.KindTableCell:
			if cells++; cells > maxTableCells {
				why = fmt.Sprintf("its tables have more than %d cells", maxTableCells)
			}
		}
		if why != "" {
			return ast.WalkStop, nil
		}
		return ast.WalkContinue, nil
	})
	return why
}

// cappedWriter keeps what is written up to limit bytes; past it, it
// keeps nothing more, fails every write, and says so (over).
type cappedWriter struct {
	buf   bytes.Buffer
	limit int
	over  bool
}

func (w *cappedWriter) Write(p []byte) (int, error) {
	if w.over || w.buf.Len()+len(p) > w.limit {
		w.over = true
		return 0, errOutputCap
	}
	return w.buf.Write(p)
}

var errOutputCap = errors.New("console: the document's HTML passed its cap")

// safeRenderer overrides goldmark's renderers of what could run script
// or load something: raw HTML, links, autolinks and images.
type safeRenderer struct{}

func (safeRenderer) RegisterFuncs(r renderer.NodeRendererFuncRegisterer) {
	r.Register(ast.KindRawHTML, renderRawHTML)
	r.Register(ast.KindHTMLBlock, renderHTMLBlock)
	r.Register(ast.KindLink, renderLink)
	r.Register(ast.KindAutoLink, renderAutoLink)
	r.Register(ast.KindImage, renderImage)
}

// renderRawHTML writes inline HTML as text.
func renderRawHTML(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkSkipChildren, nil
	}
	n := node.(*ast.RawHTML)
	for i := range n.Segments.Len() {
		seg := n.Segments.At(i)
		_, _ = w.Write(util.EscapeHTML(seg.Value(source)))
	}
	return ast.WalkSkipChildren, nil
}

// renderHTMLBlock writes a block of HTML as text, its lines kept.
func renderHTMLBlock(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.HTMLBlock)
	if entering {
		_, _ = w.WriteString(`<pre class="md-html">`)
		for i := range n.Lines().Len() {
			line := n.Lines().At(i)
			_, _ = w.Write(util.EscapeHTML(line.Value(source)))
		}
		return ast.WalkContinue, nil
	}
	if n.HasClosure() {
		_, _ = w.Write(util.EscapeHTML(n.ClosureLine.Value(source)))
	}
	_, _ = w.WriteString("</pre>\n")
	return ast.WalkContinue, nil
}

// renderLink writes a link to a safe address, else only its text (in a
// span, so the exit has something to close).
func renderLink(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.Link)
	linkOrSpan(w, n.Destination, n.Title, "", "md-nolink", entering)
	return ast.WalkContinue, nil
}

// linkOrSpan opens (entering) or closes a link of class aClass to raw
// when its address is safe, else a span of class spanClass; it returns
// the address URL-escaped.
func linkOrSpan(w util.BufWriter, raw, title []byte, aClass, spanClass string, entering bool) []byte {
	dest := util.URLEscape(raw, true)
	ok := safeURL(raw) && safeURL(dest)
	switch {
	case !entering && ok:
		_, _ = w.WriteString("</a>")
	case !entering:
		_, _ = w.WriteString("</span>")
	case ok:
		writeA(w, dest, title, aClass)
	default:
		_, _ = w.WriteString(`<span class="` + spanClass + `">`)
	}
	return dest
}

// renderAutoLink writes <https://...>, an e-mail address or a bare
// www/https link as a link when its address is safe, else as text.
func renderAutoLink(w util.BufWriter, source []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	if !entering {
		return ast.WalkContinue, nil
	}
	n := node.(*ast.AutoLink)
	url := n.URL(source)
	if n.AutoLinkType == ast.AutoLinkEmail && !bytes.HasPrefix(bytes.ToLower(url), []byte("mailto:")) {
		url = append([]byte("mailto:"), url...)
	}
	dest := util.URLEscape(url, false)
	label := util.EscapeHTML(n.Label(source))
	if !safeURL(url) || !safeURL(dest) {
		_, _ = w.Write(label)
		return ast.WalkContinue, nil
	}
	writeA(w, dest, nil, "")
	_, _ = w.Write(label)
	_, _ = w.WriteString("</a>")
	return ast.WalkContinue, nil
}

// renderImage writes an image as a link to it (its alt text the link's
// text, else its address), never as <img>: nothing is loaded.
func renderImage(w util.BufWriter, _ []byte, node ast.Node, entering bool) (ast.WalkStatus, error) {
	n := node.(*ast.Image)
	dest := linkOrSpan(w, n.Destination, n.Title, "md-image", "md-image", entering)
	if !entering {
		return ast.WalkContinue, nil
	}
	_, _ = w.WriteString("image: ")
	if !n.HasChildren() {
		_, _ = w.Write(util.EscapeHTML(dest))
	}
	return ast.WalkContinue, nil
}

// writeA opens a link to dest (already URL-escaped).
func writeA(w util.BufWriter, dest, title []byte, class string) {
	_, _ = w.WriteString(`<a href="`)
	_, _ = w.Write(util.EscapeHTML(dest))
	_ = w.WriteByte('"')
	if title != nil {
		_, _ = w.WriteString(` title="`)
		_, _ = w.Write(util.EscapeHTML(title))
		_ = w.WriteByte('"')
	}
	if class != "" {
		_, _ = w.WriteString(` class="` + class + `"`)
	}
	_, _ = w.WriteString(` rel="` + linkRel + `">`)
}

// safeURL reports whether u may be a link's address: http, https or
// mailto, or no scheme at all (a path, a query, a #fragment). Browsers
// ignore ASCII whitespace and control characters in a scheme
// ("java\tscript:"), so they are dropped before the scheme is read; a
// scheme is what comes before a colon that precedes any / ? or #.
func safeURL(u []byte) bool {
	var b strings.Builder
	for _, c := range u {
		if c > 0x20 && c != 0x7f {
			b.WriteByte(c)
		}
	}
	s := strings.ToLower(b.String())
	i := strings.IndexAny(s, ":/?#")
	if i < 0 || s[i] != ':' {
		return true
	}
	switch s[:i] {
	case "http", "https", "mailto":
		return true
	}
	return false
}
