package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
)

// Names of the memory tools.
const (
	ReadName    = "memory_read"
	AppendName  = "memory_append"
	ReplaceName = "memory_replace"
	ListName    = "memory_list"
	// ChecklistName replaces the heartbeat's checklist. memory_* does
	// not name it: a scope that lets a run rewrite what the heartbeat
	// does names it on its own.
	ChecklistName = "checklist_update"
)

// Names are the names of the memory tools, which every runtime has.
var Names = []string{ReadName, AppendName, ReplaceName, ListName, ChecklistName}

// ReadArgs are the arguments of memory_read.
type ReadArgs struct {
	Name string `json:"name" jsonschema:"description=Which document: long (long-term memory\\, MEMORY.md)\\, today or yesterday (a daily log)\\, a date YYYY-MM-DD (that day's log)\\, or checklist (the heartbeat's checklist)."`
}

// AppendArgs are the arguments of memory_append.
type AppendArgs struct {
	Text string `json:"text" jsonschema:"minLength=1,maxLength=4096,description=The note to add to today's log: what happened\\, what was decided or learned\\, in a few lines of Markdown. It is stored with the time and this run's name."`
}

// ReplaceArgs are the arguments of memory_replace.
type ReplaceArgs struct {
	Section string `json:"section" jsonschema:"minLength=1,maxLength=120,description=The title of the section of long-term memory to set\\, without the ## (e.g. People). A section that does not exist is added."`
	Text    string `json:"text" jsonschema:"maxLength=4096,description=The whole new text of the section (Markdown\\, no ## headings): it replaces what the section held\\, so keep what still holds. Empty removes the section."`
}

// ListArgs are the arguments of memory_list (none).
type ListArgs struct{}

// ChecklistArgs are the arguments of checklist_update.
type ChecklistArgs struct {
	Text string `json:"text" jsonschema:"minLength=1,maxLength=32768,description=The whole new checklist (Markdown: a list of what to check at every heartbeat). It replaces the checklist; the previous revision is kept. Keep the items that still hold."`
	// Revision is the revision the model read: the checklist is replaced
	// only while it is still at it (a compare-and-set), so an edit made
	// since is never overwritten unseen.
	Revision uint64 `json:"revision" jsonschema:"description=The revision of the checklist you read and are replacing: N in 'HEARTBEAT.md in your memory\\, revision N' (the heartbeat's prompt) or in what memory_read checklist returned; 0 when the checklist does not exist yet. If it changed since\\, nothing is written: read it again."`
}

// Tools returns memory_read, memory_append, memory_replace, memory_list
// and checklist_update on s. A run is offered those its scope names
// (memory_*: the first four; checklist_update only by its name). Every
// refusal (an unknown document, an entry too large, a
// full log) is a tool error that says what to do. Writes are recorded as
// by the run that calls them (tools.RunOf), never by what the model says.
func (s *Store) Tools() []tools.Spec {
	read := tools.Func(ReadName,
		"Read a document of your memory: long-term memory, a daily log (today, yesterday, a date) or the checklist. Returns its Markdown.",
		func(ctx context.Context, a ReadArgs) (string, error) {
			d, err := s.Read(ctx, a.Name)
			if errors.Is(err, ErrNotFound) {
				return fmt.Sprintf("%s (%s) is empty (revision 0: nothing was written to it yet).", d.File, d.Name), nil
			}
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s (revision %d, updated %s by %s):\n\n%s", d.File, d.Revision, d.Updated.Format("2006-01-02 15:04 MST"), d.By, d.Text), nil
		})
	read.Idempotent = true
	appendTool := tools.Func(AppendName,
		"Add a note to today's log in your memory (memory/YYYY-MM-DD.md), kept for later runs: what happened, what was decided or learned. For lasting facts use memory_replace.",
		func(ctx context.Context, a AppendArgs) (string, error) {
			d, err := s.Append(ctx, byRun(ctx), secret.Redact(a.Text, s.secrets))
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("added to %s (now %d of %d bytes, revision %d)", d.File, d.Bytes, MaxDoc, d.Revision), nil
		})
	replace := tools.Func(ReplaceName,
		"Set one \"## section\" of your long-term memory (MEMORY.md) to a new text: for facts that last (people, preferences, decisions). Read it first with memory_read long; the text replaces the section's.",
		func(ctx context.Context, a ReplaceArgs) (string, error) {
			d, err := s.Replace(ctx, byRun(ctx), secret.Redact(a.Section, s.secrets), secret.Redact(a.Text, s.secrets))
			if err != nil {
				return "", err
			}
			verb := "set"
			if strings.TrimSpace(a.Text) == "" {
				verb = "removed"
			}
			return fmt.Sprintf("%s the section %q of MEMORY.md (now %d of %d bytes, revision %d)", verb, a.Section, d.Bytes, MaxDoc, d.Revision), nil
		})
	list := tools.Func(ListName,
		"List the documents of your memory: name, size, revision, last update.",
		func(ctx context.Context, _ ListArgs) (string, error) {
			docs, err := s.List(ctx)
			if err != nil {
				return "", err
			}
			if len(docs) == 0 {
				return "Your memory is empty.", nil
			}
			var b strings.Builder
			for _, d := range docs {
				fmt.Fprintf(&b, "%s\t%s\t%d bytes\trevision %d\tupdated %s\n", d.Name, d.File, d.Bytes, d.Revision, d.Updated.Format("2006-01-02 15:04 MST"))
			}
			return b.String(), nil
		})
	list.Idempotent = true
	return []tools.Spec{read, appendTool, replace, list, s.checklistTool()}
}

// checklistTool is checklist_update: it replaces the checklist document
// at the revision the model read (its revision argument: a
// compare-and-set), so a person's or another run's edit made since is not
// overwritten unseen; the bucket keeps the previous revisions.
func (s *Store) checklistTool() tools.Spec {
	return tools.Func(ChecklistName,
		"Replace your heartbeat checklist (HEARTBEAT.md, kept in your memory) with a new text: the whole checklist, as a Markdown list of what to check at every heartbeat. "+
			"Pass the revision you read (the heartbeat's prompt names it, as does memory_read checklist; 0 if there is none yet): if the checklist changed since, nothing is written and you must read it again. "+
			"Keep the items that still hold; the previous revision is kept, and the next heartbeat uses the new one.",
		func(ctx context.Context, a ChecklistArgs) (string, error) {
			if !s.checklist {
				return "", errors.New("not changed: the heartbeat reads its checklist from a file (heartbeat.checklist), not from memory, so this would change nothing; tell the user what to change instead")
			}
			text := strings.TrimSpace(secret.Redact(a.Text, s.secrets))
			if ParseChecklist([]byte(text)).Empty() {
				// The heartbeat's own rule: it would skip every run
				// (empty-checklist) without asking the model.
				return "", errorf(ErrInvalid, "the checklist is empty (it has no items: only blanks, headings, comments, rules or list items without text): write the whole checklist, one item per line with its text (an empty checklist stops the heartbeat; only the user may do that)")
			}
			d, err := s.Put(ctx, Checklist, text+"\n", byRun(ctx), &a.Revision)
			if errors.Is(err, ErrConflict) {
				return "", fmt.Errorf("not changed: %w; read it again with memory_read checklist, then call checklist_update with the revision it shows and a text that keeps what was changed", err)
			}
			if err != nil {
				return "", err
			}
			if a.Revision == 0 {
				return fmt.Sprintf("wrote the checklist (%s, revision %d, %d bytes); the next heartbeat uses it", d.File, d.Revision, d.Bytes), nil
			}
			return fmt.Sprintf("replaced the checklist (%s, now revision %d, %d bytes; revision %d is kept in its history); the next heartbeat uses it", d.File, d.Revision, d.Bytes, a.Revision), nil
		})
}

// byRun names the run that calls a tool: "<source>/<name>, run <id>", or
// "by hand" outside a run (agentwork tools call).
func byRun(ctx context.Context) string {
	r, ok := tools.RunOf(ctx)
	if !ok {
		return "by hand"
	}
	return fmt.Sprintf("%s/%s, run %s", r.Source, r.Name, r.ID)
}
