package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// pageNames are the templates that extend base.html.
var pageNames = []string{"login", "error", "overview", "runs", "run", "jobs", "heartbeat", "deliveries", "approvals", "approval", "workflows", "workflow_run", "memory", "memory_doc", "usage", "tools", "job_form", "workflow"}

// funcs are the templates' helpers. None returns template.HTML but
// markdown, whose HTML is its safe renderer's (markdown.go): what a
// model or a web page wrote is always escaped.
var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"whenp": func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	// inzone shows t in the IANA zone tz (a job's), else in UTC.
	"inzone": func(t *time.Time, tz string) string {
		if t == nil || t.IsZero() {
			return "—"
		}
		if loc, err := time.LoadLocation(tz); err == nil && tz != "" {
			return t.In(loc).Format("2006-01-02 15:04 MST")
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"ms":  func(ms int64) string { return formatMS(float64(ms)) },
	"msf": formatMS,
	"cut": cut,
	"summary": func(r agentwork.Result) string {
		switch r.Outcome {
		case bus.OutcomeSkip:
			return strings.TrimSuffix("skipped: "+r.Reason+": "+r.Detail, ": ")
		case bus.OutcomeError:
			return strings.TrimSuffix(r.Class+" error: "+r.Error, ": ")
		}
		if r.Text != "" {
			return r.Text
		}
		return r.Reply
	},
	"pretty": func(s string) string {
		var buf bytes.Buffer
		if json.Indent(&buf, []byte(s), "", "  ") == nil {
			return buf.String()
		}
		return s
	},
	"join": strings.Join,
	// tokens writes a count of tokens short (12.3k); f1 a coordinate.
	"tokens": tokens,
	// sources are those the tools page asks about.
	"sources": func() []string { return scopeSources },
	"add": func(a int, b ...int) int {
		for _, n := range b {
			a += n
		}
		return a
	},
	"sub": func(a, b int) int { return a - b },
	"f1":  func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) },
	// decideArgs is what the decide-form template needs.
	"decideArgs": func(v *view, id, back string) decideArgs { return decideArgs{ID: id, CSRF: v.CSRF, Back: back} },
	"receipt": func(r connectors.Receipt) string {
		var parts []string
		if len(r.MessageIDs) > 0 {
			parts = append(parts, "message ids "+strings.Join(r.MessageIDs, ", "))
		}
		switch {
		case r.Parts == 1:
			parts = append(parts, "1 part")
		case r.Parts > 1:
			parts = append(parts, fmt.Sprintf("%d parts", r.Parts))
		}
		return strings.Join(parts, " · ")
	},
	"nav": func() []navItem {
		return []navItem{{"overview", "/", "Overview"}, {"runs", "/runs", "Runs"}, {"jobs", "/jobs", "Jobs"},
			{"heartbeat", "/heartbeat", "Heartbeat"}, {"workflows", "/workflows", "Workflows"}, {"approvals", "/approvals", "Approvals"}, {"memory", "/memory", "Memory"}, {"deliveries", "/deliveries", "Deliveries"}, {"usage", "/usage", "Usage"}, {"tools", "/tools", "Tools"}}
	},
	// markdown renders a memory document's Markdown as safe HTML
	// (markdown.go: no raw HTML, no script links, no images loaded).
	"markdown": markdown,
}

type navItem struct{ Key, Href, Label string }

type decideArgs struct{ ID, CSRF, Back string }

func formatMS(ms float64) string {
	switch {
	case ms < 1000:
		return fmt.Sprintf("%.0f ms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// cut shortens s to n characters, marking the cut.
func cut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// parsePages parses base.html and the parts (parts_*.html: templates
// more than one page uses) with each page.
func parsePages() map[string]*template.Template {
	base := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/base.html", "templates/parts_*.html"))
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html"))
	}
	return out
}
