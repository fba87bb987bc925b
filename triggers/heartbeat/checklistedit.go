package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools/memory"
)

// Where a checklist lives (ChecklistView.Source).
const (
	SourceFile   = "file"
	SourceMemory = "memory"
)

// ChecklistView is the checklist as it is now: where it lives, its text
// as written, its revision, and whether a run could use it. It is what
// GET /v1/heartbeat/checklist answers.
type ChecklistView struct {
	// Heartbeat is the heartbeat's name.
	Heartbeat string `json:"heartbeat"`
	// Source is where it lives: "file" (heartbeat.checklist, this
	// instance's file) or "memory" (the checklist document of the agent's
	// memory, heartbeat.checklist_in_memory).
	Source string `json:"source"`
	// Path is the file: the checklist itself (source file), or the one
	// that fills the document the first time (source memory).
	Path string `json:"path"`
	// Document is the memory document (source memory): "checklist".
	Document string `json:"document,omitempty"`
	// Text is the checklist as written, comments and all; empty when it
	// does not exist or is too large to use.
	Text string `json:"text"`
	// Bytes is the size of Text.
	Bytes int `json:"bytes"`
	// Revision is what a change sends in If-Match (also the ETag): the
	// first 16 hex digits of the file's SHA-256, or the document's
	// revision number. "" when there is no checklist yet (create it with
	// If-None-Match: *).
	Revision string `json:"revision"`
	// Items counts the lines a run goes through (the parser of the runs:
	// not headings, comments, rules or empty list items).
	Items int `json:"items"`
	// Status is "" when a run can use it, else "missing" (no file or
	// document, unreadable, too large) or "empty" (no items: the run
	// skips without calling the model); Detail says why and what to do.
	Status string `json:"status,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Updated and By: the memory document's last write (source memory).
	Updated *time.Time `json:"updated,omitempty"`
	By      string     `json:"by,omitempty"`
}

// Checklist reads the checklist as the next run would: from the file, or
// from the memory document; a document never written shows the file's
// text that the next run fills it with (without writing it: only runs
// and writes do), with no revision. An error is the memory's (503:
// retry).
func (h *Heartbeat) Checklist(ctx context.Context) (ChecklistView, error) {
	v := h.checklistView(SourceFile)
	if !h.cfg.ChecklistInMemory {
		data, rev, status, detail := readChecklistFile(h.checklist)
		v.Revision, v.Status, v.Detail = rev, status, detail
		if status == "" {
			v.setText(string(data))
			_, v.Status, v.Detail = parseChecklistFile(h.checklist, data)
		}
		return v, nil
	}
	v = h.checklistView(SourceMemory)
	d, err := h.memory.Read(ctx, memory.Checklist)
	if errors.Is(err, memory.ErrNotFound) {
		// Never written: the file that the next run fills it from, as
		// it is; nothing is written by a read.
		data, status, detail := h.fileForMemory()
		if status != "" {
			v.Status, v.Detail = status, detail
			return v, nil
		}
		v.setText(string(data))
		v.Detail = "not in memory yet: will be filled from " + filepath.Base(h.checklist) + " at the next run (or by a write)"
		if v.Items == 0 {
			v.Status = checklistEmpty
			v.Detail = fmt.Sprintf("%s, which will fill the checklist in memory at the next run, has no items (only headings, comments or empty list items)", h.checklist)
		}
		return v, nil
	}
	if err != nil {
		return ChecklistView{}, fmt.Errorf("read the checklist from memory: %w", err)
	}
	v.memoryDoc(d)
	return v, nil
}

// checklistView is the view of a checklist in source, before it is read.
func (h *Heartbeat) checklistView(source string) ChecklistView {
	v := ChecklistView{Heartbeat: h.cfg.Name, Source: source, Path: h.checklist}
	if abs, err := filepath.Abs(h.checklist); err == nil {
		v.Path = abs // the client may run elsewhere than the server
	}
	if source == SourceMemory {
		v.Document = memory.Checklist
	}
	return v
}

// setText sets the text and what the runs' parser makes of it.
func (v *ChecklistView) setText(text string) {
	v.Text, v.Bytes, v.Items = text, len(text), ParseChecklist([]byte(text)).Items
}

// memoryDoc fills v from the memory document d.
func (v *ChecklistView) memoryDoc(d memory.Doc) {
	v.setText(d.Text)
	v.Revision = strconv.FormatUint(d.Revision, 10)
	if !d.Updated.IsZero() {
		u := d.Updated
		v.Updated = &u
	}
	v.By = d.By
	if v.Items == 0 {
		v.Status, v.Detail = checklistEmpty, memoryEmptyDetail(d.Revision)
	}
}

// Errors of WriteChecklist (a *bus.ServiceError: HTTP status, code and a
// detail saying what to do). Compare with errors.Is.
var (
	ErrChecklistConflict = &bus.ServiceError{Status: http.StatusPreconditionFailed, Code: "conflict", Detail: "the checklist changed since it was read"}
	ErrChecklistTooLarge = &bus.ServiceError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Detail: "the checklist is too large"}
	ErrChecklistRevision = &bus.ServiceError{Status: http.StatusBadRequest, Code: "invalid", Detail: "not a revision of the checklist"}
)

// WriteChecklist replaces the checklist with text, only while it is at
// revision rev (Revision of a ChecklistView; "" only while there is no
// checklist yet): else ErrChecklistConflict, whose detail names the
// revision it is at, and nothing is written. by names who wrote it (the
// memory document's by; the log's for a file).
//
// A file is written atomically (a temporary file in its directory,
// renamed over it; its mode kept), at most MaxChecklistBytes; in a
// cluster this changes this instance's file only. In memory it is the
// store's compare-and-set, at most memory.MaxDoc. It answers the
// checklist as written.
func (h *Heartbeat) WriteChecklist(ctx context.Context, text, rev, by string) (ChecklistView, error) {
	if !h.cfg.ChecklistInMemory {
		return h.writeChecklistFile(text, rev, by)
	}
	var at uint64 // 0: only while it does not exist
	if rev != "" {
		n, err := strconv.ParseUint(rev, 10, 64)
		if err != nil {
			return ChecklistView{}, &bus.ServiceError{Status: ErrChecklistRevision.Status, Code: ErrChecklistRevision.Code,
				Detail: fmt.Sprintf("%q is not a revision of the checklist in memory (a number): GET /v1/heartbeat/checklist and send its ETag in If-Match", rev)}
		}
		at = n
	}
	d, err := h.memory.Put(ctx, memory.Checklist, text, by, &at)
	if err != nil {
		if _, ok := errors.AsType[*bus.ServiceError](err); ok {
			return ChecklistView{}, err // conflict (naming the revision), too large: the store's words
		}
		return ChecklistView{}, fmt.Errorf("write the checklist to memory: %w", err)
	}
	h.log.Info("checklist written", zap.String("to", "memory"), zap.Uint64("revision", d.Revision), zap.String("by", by))
	v := h.checklistView(SourceMemory)
	d.Text = text
	v.memoryDoc(d)
	return v, nil
}

// writeChecklistFile is WriteChecklist for a checklist file.
func (h *Heartbeat) writeChecklistFile(text, rev, by string) (ChecklistView, error) {
	if len(text) > MaxChecklistBytes {
		return ChecklistView{}, &bus.ServiceError{Status: ErrChecklistTooLarge.Status, Code: ErrChecklistTooLarge.Code,
			Detail: fmt.Sprintf("the checklist is %d bytes, more than %d KiB: shorten it", len(text), MaxChecklistBytes>>10)}
	}
	h.fileMu.Lock() // one write of this instance at a time: the compare and the rename
	defer h.fileMu.Unlock()
	path := h.checklist
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real // keep a symlinked checklist a symlink
	}
	_, cur, status, detail := readChecklistFile(path)
	if cur == "" && status != "" {
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			return ChecklistView{}, &bus.ServiceError{Status: http.StatusInternalServerError, Code: "unreadable", Detail: detail + "; nothing was written: make it readable by the server"}
		}
	}
	if cur != rev {
		now := "does not exist"
		if cur != "" {
			now = "is at revision " + cur
		}
		was := "revision " + rev
		if rev == "" {
			was = "nothing (If-None-Match: *)"
		}
		return ChecklistView{}, &bus.ServiceError{Status: ErrChecklistConflict.Status, Code: ErrChecklistConflict.Code,
			Detail: fmt.Sprintf("%s changed since it was read: the change was made at %s, and it %s now; nothing was written: GET /v1/heartbeat/checklist again, merge, and send its revision in If-Match", filepath.Base(h.checklist), was, now)}
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := writeAtomic(path, []byte(text), mode); err != nil {
		return ChecklistView{}, &bus.ServiceError{Status: http.StatusInternalServerError, Code: "write_failed",
			Detail: fmt.Sprintf("cannot write %s: %v; nothing was changed: check the directory's permissions and free space", h.checklist, err)}
	}
	h.log.Info("checklist written", zap.String("to", h.checklist), zap.String("revision", fileRevision([]byte(text))), zap.String("by", by))
	v := h.checklistView(SourceFile)
	v.Revision = fileRevision([]byte(text))
	v.setText(text)
	_, v.Status, v.Detail = parseChecklistFile(h.checklist, []byte(text))
	return v, nil
}

// writeAtomic replaces path with data: a temporary file in its directory,
// synced, given mode and renamed over it, so a run reads the old or the
// new checklist, never half of one.
func writeAtomic(path string, data []byte, mode fs.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	return err
}
