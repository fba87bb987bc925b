package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentwork/agentwork/tools/memory"
)

// memoryPageSize is the documents, and the revisions, of one page.
const memoryPageSize = 50

// memoryListPage is the data of the memory page.
type memoryListPage struct {
	Docs         []memory.Doc
	Newer, Older string
	Off          bool // the server keeps no memory
}

func (h *handler) memoryList(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Nav = "Memory", "memory"
	var p memoryListPage
	var docs []memory.Doc
	if err := h.call(r.Context(), http.MethodGet, "/v1/memory", nil, &docs, nil); err != nil {
		if status(err) == http.StatusNotFound {
			p.Off = true
		} else {
			v.Error = "The memory could not be read: " + err.Error()
		}
	}
	p.Docs, p.Newer, p.Older = pageOf(docs, r.URL.Query().Get("page"), "/memory?")
	v.Data = p
	h.render(w, http.StatusOK, "memory", v)
}

// pageOf is the page (?page=, from 1) of list, with the links to the
// pages around it (base ends in ? or &).
func pageOf[T any](list []T, page, base string) (out []T, newer, older string) {
	n, err := strconv.Atoi(page)
	if err != nil || n < 1 {
		n = 1
	}
	from := (n - 1) * memoryPageSize
	if from < len(list) {
		out = list[from:min(from+memoryPageSize, len(list))]
	}
	if len(list) > from+memoryPageSize {
		older = base + "page=" + strconv.Itoa(n+1)
	}
	if n > 1 {
		newer = base + "page=" + strconv.Itoa(n-1)
	}
	return out, newer, older
}

// memoryDocPage is the data of a document's page: the document, its
// editor, and its history; after a conflicting save, the text the user
// sent (Mine) next to the document as it is now.
type memoryDocPage struct {
	Name     string // as the URL names it
	Doc      memory.Doc
	Missing  bool // nothing was written to it yet
	Edit     bool
	Text     string // the editor's text
	Revision uint64 // the revision the editor's save is made at
	Conflict bool
	Mine     string
	History  []memory.Doc
	Newer    string
	Older    string
	// Source shows the text as it is (?view=source) instead of its
	// Markdown rendered (markdown.go says what is not rendered).
	Source bool
	// AdminOnly: the document is the heartbeat's checklist, which only
	// the admin changes in the console (api.RefuseChecklistChange).
	AdminOnly bool
}

func (h *handler) memoryDoc(w http.ResponseWriter, r *http.Request, v *view) {
	q := r.URL.Query()
	p := memoryDocPage{Name: r.PathValue("doc"), Edit: q.Get("edit") != "", Source: q.Get("view") == "source"}
	p.AdminOnly = memory.IsChecklist(p.Name)
	v.Title, v.Nav = "Memory: "+p.Name, "memory"
	if code, ok := h.readDoc(w, r, v, &p); !ok {
		h.render(w, code, "error", v)
		return
	}
	p.Text, p.Revision = p.Doc.Text, p.Doc.Revision
	if !p.Edit && !p.Missing {
		var hist []memory.Doc
		if err := h.call(r.Context(), http.MethodGet, "/v1/memory/"+url.PathEscape(p.Name)+"/history", nil, &hist, nil); err != nil {
			v.Error = "The history could not be read: " + err.Error()
		}
		base := "/memory/" + url.PathEscape(p.Name) + "?"
		if p.Source {
			base += "view=source&"
		}
		p.History, p.Newer, p.Older = pageOf(hist, q.Get("page"), base)
	}
	v.Data = p
	h.render(w, http.StatusOK, "memory_doc", v)
}

// readDoc reads p.Name into p.Doc (p.Missing if nothing was written yet);
// on another failure it sets v.Error and returns the status to answer.
func (h *handler) readDoc(w http.ResponseWriter, r *http.Request, v *view, p *memoryDocPage) (int, bool) {
	err := h.call(r.Context(), http.MethodGet, "/v1/memory/"+url.PathEscape(p.Name), nil, &p.Doc, nil)
	switch {
	case err == nil:
		return 0, true
	case status(err) == http.StatusNotFound && strings.Contains(err.Error(), "nothing was written"):
		p.Missing = true
		return 0, true
	}
	v.Error = "The document could not be read: " + err.Error()
	if st := status(err); st != 0 {
		return st, false
	}
	return http.StatusInternalServerError, false
}

// saveMemory writes a document through PUT /v1/memory/{doc} at the
// revision the editor was opened at (If-Match; If-None-Match: * for a
// document not written yet). When someone else saved meanwhile (412) the
// editor comes back with the user's text kept and the document as it is
// now shown beside it, at its new revision: saving again replaces it.
func (h *handler) saveMemory(w http.ResponseWriter, r *http.Request, ss *session) {
	name := r.PathValue("doc")
	text := strings.ReplaceAll(r.PostFormValue("text"), "\r\n", "\n")
	rev, err := strconv.ParseUint(r.PostFormValue("revision"), 10, 64)
	if err != nil {
		h.sessions.setFlash(r, "Refused: the form has no revision; open the editor again.")
		http.Redirect(w, r, "/memory/"+url.PathEscape(name), http.StatusSeeOther)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPut, "/v1/memory/"+url.PathEscape(name), strings.NewReader(text))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Header.Set("Content-Type", "text/markdown; charset=utf-8")
	if rev == 0 {
		req.Header.Set("If-None-Match", "*")
	} else {
		req.Header.Set("If-Match", strconv.Quote(strconv.FormatUint(rev, 10)))
	}
	err = h.send(req, nil, nil)
	if err == nil {
		h.sessions.setFlash(r, "Saved "+name+".")
		http.Redirect(w, r, "/memory/"+url.PathEscape(name), http.StatusSeeOther)
		return
	}
	// Refused: the editor again, nothing lost.
	v := &view{Who: ss.who, Write: ss.write, Admin: ss.cred == "", CSRF: ss.csrf, Path: r.URL.Path, Nav: "memory", Title: "Memory: " + name}
	p := memoryDocPage{Name: name, Edit: true, Text: text, Revision: rev, AdminOnly: memory.IsChecklist(name)}
	code := status(err)
	if code == http.StatusPreconditionFailed {
		p.Conflict, p.Mine = true, text
		if c, ok := h.readDoc(w, r, v, &p); !ok {
			h.render(w, c, "error", v)
			return
		}
		p.Revision = p.Doc.Revision
		v.Error = "Not saved: someone else saved " + name + " after you opened it. Your text is kept below, next to theirs; merge them and save again (that replaces theirs)."
	} else {
		v.Error = "Not saved: " + err.Error()
		if code == 0 {
			code = http.StatusInternalServerError
		}
	}
	if code == http.StatusPreconditionFailed {
		code = http.StatusConflict
	}
	v.Data = p
	h.render(w, code, "memory_doc", v)
}
