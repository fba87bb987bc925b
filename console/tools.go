package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/tools/mcp"
)

// scopeSources are the sources whose scope the tools page shows, when the
// server's runner handles them (GET /v1/tools?source= answers 400 for a
// source no trigger handles: that one is left out).
var scopeSources = []string{bus.SourceTask, bus.SourceCron, bus.SourceHeartbeat, bus.SourceWorkflow}

// toolsPage is the data of the tools page.
type toolsPage struct {
	Servers  []serverRow
	Builtins []toolRow
	Scopes   []scopeRow
	Source   string // the source and name asked about, if any
	Name     string
	Asked    *scopeRow
	AskedErr string
}

type serverRow struct {
	mcp.Status
	Described []toolRow // its tools, with their descriptions where known
}

type toolRow struct {
	agentwork.ToolInfo
	OfferedTo []string // the sources whose runs are offered it
}

type scopeRow struct {
	Source, Name string
	Scope        []string
	From         string
	Notify       bool
	Tools        []string
}

func (h *handler) toolsList(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Nav = "Tools", "tools"
	var p toolsPage
	var all agentwork.ToolList
	if err := h.call(r.Context(), http.MethodGet, "/v1/tools", nil, &all, nil); err != nil {
		if status(err) == http.StatusNotFound {
			v.Error = "This server runs no tools (no runner): start agentwork serve with a model to see them."
		} else {
			v.Error = "The tools could not be read: " + err.Error()
		}
		v.Data = p
		h.render(w, http.StatusOK, "tools", v)
		return
	}
	offered := map[string][]string{}
	for _, src := range scopeSources {
		var l agentwork.ToolList
		if err := h.call(r.Context(), http.MethodGet, "/v1/tools?"+url.Values{"source": {src}}.Encode(), nil, &l, nil); err != nil {
			continue // a source this server does not run
		}
		row := scopeOf(l)
		for _, t := range row.Tools {
			offered[t] = append(offered[t], src)
		}
		p.Scopes = append(p.Scopes, row)
	}
	info := map[string]toolRow{}
	for _, t := range all.Tools {
		row := toolRow{ToolInfo: t, OfferedTo: offered[t.Name]}
		info[t.Name] = row
		if !strings.Contains(t.Name, tools.ServerSeparator) {
			p.Builtins = append(p.Builtins, row)
		}
	}
	for _, s := range all.Servers {
		row := serverRow{Status: s}
		for _, name := range s.Tools {
			t, ok := info[name]
			if !ok {
				t = toolRow{ToolInfo: agentwork.ToolInfo{Name: name}, OfferedTo: offered[name]}
			}
			row.Described = append(row.Described, t)
		}
		p.Servers = append(p.Servers, row)
	}
	// What the runs of one source and name are offered (a cron job's own
	// tools, tasks.<name>.tools).
	q := r.URL.Query()
	if p.Source, p.Name = q.Get("source"), q.Get("name"); p.Source != "" {
		var l agentwork.ToolList
		if err := h.call(r.Context(), http.MethodGet, "/v1/tools?"+url.Values{"source": {p.Source}, "name": {p.Name}}.Encode(), nil, &l, nil); err != nil {
			p.AskedErr = err.Error()
		} else {
			row := scopeOf(l)
			p.Asked = &row
		}
	}
	v.Data = p
	h.render(w, http.StatusOK, "tools", v)
}

func scopeOf(l agentwork.ToolList) scopeRow {
	row := scopeRow{Source: l.Source, Name: l.Name, Scope: l.Scope, From: l.From, Notify: l.Notify}
	for _, t := range l.Tools {
		row.Tools = append(row.Tools, t.Name)
	}
	return row
}
