package heartbeat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/tools/memory"
)

// MaxChecklistBytes is the largest checklist read; a larger file skips the
// run (no-checklist) instead of sending a huge prompt.
const MaxChecklistBytes = 256 << 10

// Checklist is a parsed HEARTBEAT.md (memory.ParsedChecklist: the one rule of
// what a checklist holds, which checklist_update applies too).
type Checklist = memory.ParsedChecklist

// ParseChecklist parses the text of a checklist (memory.ParseChecklist).
func ParseChecklist(data []byte) Checklist { return memory.ParseChecklist(data) }

// Checklist statuses carried by a request whose checklist cannot be used.
const (
	checklistEmpty   = "empty"
	checklistMissing = "missing"
)

// ReasonNoChecklist is the skip reason when the checklist file is missing,
// unreadable or too large.
const ReasonNoChecklist = "no-checklist"

// readChecklist reads and parses path. status is "" when the checklist is
// usable, else checklistEmpty or checklistMissing with detail saying why.
func readChecklist(path string) (c Checklist, status, detail string) {
	data, _, status, detail := readChecklistFile(path)
	if status != "" {
		return c, status, detail
	}
	return parseChecklistFile(path, data)
}

// parseChecklistFile parses data read from path: status checklistEmpty
// when it has no items.
func parseChecklistFile(path string, data []byte) (c Checklist, status, detail string) {
	c = ParseChecklist(data)
	if c.Empty() {
		return c, checklistEmpty, fmt.Sprintf("%s has no items (only headings, comments or empty list items)", path)
	}
	return c, "", ""
}

// readChecklistFile reads the checklist file path: its bytes and its
// revision (fileRevision of its bytes; "" when it does not exist). status
// is checklistMissing, with detail saying why, when it cannot be read, is
// no regular file (a device or a FIFO is never read: it could be endless
// or block), or is larger than MaxChecklistBytes: then data is nil, the
// file is read no further than the cap, and the revision is
// bigFileRevision's, so a write may still replace it.
func readChecklistFile(path string) (data []byte, rev, status, detail string) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, "", checklistMissing, fmt.Sprintf("%s does not exist: create it (see examples/quickstart/HEARTBEAT.md) or set heartbeat.checklist", path)
		}
		return nil, "", checklistMissing, fmt.Sprintf("cannot read %s: %v", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, "", checklistMissing, fmt.Sprintf("%s is not a regular file (%s): point heartbeat.checklist at a Markdown file", path, fi.Mode().Type())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", checklistMissing, fmt.Sprintf("cannot read %s: %v", path, err)
	}
	defer f.Close()
	data, err = io.ReadAll(io.LimitReader(f, MaxChecklistBytes+1))
	if err != nil {
		return nil, "", checklistMissing, fmt.Sprintf("cannot read %s: %v", path, err)
	}
	if len(data) > MaxChecklistBytes {
		if fi, err = f.Stat(); err != nil {
			return nil, "", checklistMissing, fmt.Sprintf("cannot read %s: %v", path, err)
		}
		return nil, bigFileRevision(data, fi), checklistMissing, fmt.Sprintf("%s is larger than %d KiB: shorten it", path, MaxChecklistBytes>>10)
	}
	return data, fileRevision(data), "", ""
}

// bigFileRevision is the revision of a file larger than the cap: of its
// first bytes read (head), its size and its modification time, so it is
// never read to its end.
func bigFileRevision(head []byte, fi fs.FileInfo) string {
	sum := sha256.New()
	sum.Write(head)
	fmt.Fprintf(sum, "\x00%d\x00%d", fi.Size(), fi.ModTime().UnixNano())
	return hex.EncodeToString(sum.Sum(nil))[:revisionHex]
}

// revisionHex is the length of a checklist file's revision.
const revisionHex = 16

// fileRevision is the revision of a checklist file holding data: the
// first 16 hex digits of its SHA-256, so an edit made with any editor
// changes it.
func fileRevision(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:revisionHex]
}

// Memory is where a checklist kept in memory lives
// (heartbeat.checklist_in_memory): a *memory.Store of tools/memory. Its
// methods honour ctx and are safe for concurrent use.
type Memory interface {
	// Read returns the document called name; memory.ErrNotFound when it
	// was never written.
	Read(ctx context.Context, name string) (memory.Doc, error)
	// Put writes the document called name; with rev, only while it is at
	// *rev (0: while it does not exist), else memory.ErrConflict.
	Put(ctx context.Context, name, text, by string, rev *uint64) (memory.Doc, error)
}

// checklistNow reads the checklist as a run uses it now: from the file,
// or from the memory document (copying the file into it when the
// document was never written). name is how the prompt names it. An error
// is one of the memory (the fire is tried again); every other problem is
// a status with its detail, as from readChecklist.
func (h *Heartbeat) checklistNow(ctx context.Context) (c Checklist, name, status, detail string, err error) {
	if !h.cfg.ChecklistInMemory {
		c, status, detail = readChecklist(h.checklist)
		return c, filepath.Base(h.checklist), status, detail, nil
	}
	d, status, detail, err := h.memoryChecklist(ctx)
	if status != "" || err != nil {
		return c, "", status, detail, err
	}
	name = fmt.Sprintf("%s in your memory, revision %d", d.File, d.Revision)
	c = ParseChecklist([]byte(d.Text))
	if c.Empty() {
		return c, name, checklistEmpty, memoryEmptyDetail(d.Revision), nil
	}
	return c, name, "", "", nil
}

// memoryEmptyDetail says why a checklist in memory at rev skips.
func memoryEmptyDetail(rev uint64) string {
	return fmt.Sprintf("the checklist in memory (revision %d) has no items (only headings, comments or empty list items): agentwork memory edit checklist", rev)
}

// memoryChecklist reads the checklist document of the memory as a run
// does: a document never written is filled from the file first
// (seedChecklist); when there is no file either, status says so.
func (h *Heartbeat) memoryChecklist(ctx context.Context) (d memory.Doc, status, detail string, err error) {
	d, err = h.memory.Read(ctx, memory.Checklist)
	if errors.Is(err, memory.ErrNotFound) {
		d, status, detail, err = h.seedChecklist(ctx)
		if status != "" || err != nil {
			return d, status, detail, err
		}
	}
	if err != nil {
		return d, "", "", fmt.Errorf("read the checklist from memory: %w", err)
	}
	return d, "", "", nil
}

// seedChecklist copies the checklist file into the memory document that
// was never written, once (a create: of instances that race, one writes
// and the others read what it wrote). Only a run (and a write) seeds:
// a read shows the file instead (fileForMemory).
func (h *Heartbeat) seedChecklist(ctx context.Context) (d memory.Doc, status, detail string, err error) {
	data, status, detail := h.fileForMemory()
	if status != "" {
		return d, status, detail, nil
	}
	var none uint64
	d, err = h.memory.Put(ctx, memory.Checklist, string(data), "heartbeat: copied from "+filepath.Base(h.checklist), &none)
	switch {
	case errors.Is(err, memory.ErrConflict):
		d, err = h.memory.Read(ctx, memory.Checklist)
	case errors.Is(err, memory.ErrTooLarge):
		return d, checklistMissing, fmt.Sprintf("%s cannot fill the checklist in memory: %v", h.checklist, err), nil
	case err == nil:
		h.log.Info("checklist copied into memory", zap.String("from", h.checklist), zap.Uint64("revision", d.Revision))
	}
	return d, "", "", err
}

// fileForMemory reads the file that fills the checklist in memory never
// written (bounded as readChecklistFile); status checklistMissing, with
// what to do, when it cannot.
func (h *Heartbeat) fileForMemory() (data []byte, status, detail string) {
	data, _, status, detail = readChecklistFile(h.checklist)
	switch {
	case status == "":
		return data, "", ""
	case errors.Is(statErr(h.checklist), fs.ErrNotExist):
		return nil, checklistMissing, fmt.Sprintf("the checklist in memory is empty and %s, which would fill it, does not exist: write it with agentwork memory edit checklist", h.checklist)
	}
	return nil, checklistMissing, "the checklist in memory is empty and its file cannot fill it: " + detail
}

// statErr is os.Stat's error for path.
func statErr(path string) error {
	_, err := os.Stat(path)
	return err
}
