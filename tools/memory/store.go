package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// Names of the documents (the keys of agentwork_memory).
const (
	// Long is long-term memory (MEMORY.md).
	Long = "long"
	// Checklist is the heartbeat's checklist (HEARTBEAT.md).
	Checklist = "checklist"
	// DailyPrefix starts the key of a daily log: daily.YYYY-MM-DD
	// (memory/YYYY-MM-DD.md).
	DailyPrefix = "daily."
)

// dateLayout is the date of a daily log.
const dateLayout = "2006-01-02"

// Size caps, in bytes.
const (
	// MaxDoc bounds a document: long-term memory, a daily log, the checklist.
	MaxDoc = 32 << 10
	// MaxEntry bounds what one memory_append or memory_replace writes.
	MaxEntry = 4 << 10
)

// Error is an error of the memory store, with an HTTP status and a code:
// what the NATS service replies and HTTP serves as problem details.
// Compare with errors.Is against the sentinels below (same Code).
type Error = bus.ServiceError

// Sentinel errors.
var (
	ErrNotFound = &Error{Status: http.StatusNotFound, Code: "not_found", Detail: "no such memory document"}
	ErrConflict = &Error{Status: http.StatusPreconditionFailed, Code: "conflict", Detail: "the document changed since it was read"}
	ErrTooLarge = &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Detail: "too large"}
	ErrInvalid  = &Error{Status: http.StatusBadRequest, Code: "invalid", Detail: "invalid request"}
)

func errorf(base *Error, format string, args ...any) *Error {
	return &Error{Status: base.Status, Code: base.Code, Detail: fmt.Sprintf(format, args...)}
}

// Doc is one memory document as the store shows it.
type Doc struct {
	// Name is its key: long, checklist or daily.YYYY-MM-DD.
	Name string `json:"name"`
	// File is its name as a Markdown file: MEMORY.md, HEARTBEAT.md,
	// memory/YYYY-MM-DD.md.
	File string `json:"file"`
	// Text is the Markdown (left out of List).
	Text string `json:"text,omitempty"`
	// Bytes is the size of Text.
	Bytes int `json:"bytes"`
	// Revision is the revision of this version: what a write at it
	// (compare-and-set) names. 0: the document does not exist.
	Revision uint64 `json:"revision"`
	// Updated is when it was written, and By who wrote it.
	Updated time.Time `json:"updated,omitzero"`
	By      string    `json:"by,omitempty"`
}

// record is the stored value of a document.
type record struct {
	Text    string    `json:"text"`
	Updated time.Time `json:"updated"`
	By      string    `json:"by,omitempty"`
}

// Store reads and writes the memory documents in agentwork_memory. Safe
// for concurrent use; its methods honour ctx.
type Store struct {
	bus       *bus.Bus
	kv        jetstream.KeyValue
	cfg       Config
	loc       *time.Location
	now       func() time.Time
	keep      time.Duration
	checklist bool // the heartbeat reads its checklist from memory (WithHeartbeatChecklist)

	secrets []string // cut out of what the tools write (WithSecrets)
}

// Option configures New.
type Option func(*Store)

// WithSecrets sets the values (API keys, tokens: the config's ${VAR}
// values) cut out of what the memory tools write, in every encoding
// internal/secret knows: a model that saw one in a tool result does not
// keep it in memory, where every later prompt, export and reader would see
// it.
func WithSecrets(secrets ...string) Option {
	return func(s *Store) { s.secrets = append(s.secrets, secrets...) }
}

// WithClock sets the time source (default time.Now).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithHeartbeatChecklist says whether the heartbeat reads its checklist
// from the checklist document (heartbeat.checklist_in_memory). Without
// it, checklist_update refuses: it would change nothing.
func WithHeartbeatChecklist(on bool) Option { return func(s *Store) { s.checklist = on } }

// New returns the store of b's memory bucket. cfg must be valid (see
// Config.Validate). It does no I/O.
func New(b *bus.Bus, cfg Config, opts ...Option) (*Store, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	loc, _ := time.LoadLocation(cfg.Timezone)
	s := &Store{bus: b, kv: b.Memory, cfg: cfg, loc: loc, now: time.Now, keep: time.Duration(cfg.KeepDays) * 24 * time.Hour}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Today returns the key of today's log, in the configured zone.
func (s *Store) Today() string { return DailyPrefix + s.now().In(s.loc).Format(dateLayout) }

// Yesterday returns the key of yesterday's log.
func (s *Store) Yesterday() string {
	return DailyPrefix + s.now().In(s.loc).AddDate(0, 0, -1).Format(dateLayout)
}

// Resolve returns the key of the document called name: long (or
// MEMORY.md), checklist (or HEARTBEAT.md), today, yesterday, a date
// YYYY-MM-DD (or daily.YYYY-MM-DD, memory/YYYY-MM-DD.md).
func (s *Store) Resolve(name string) (string, error) {
	n := strings.TrimSpace(name)
	if IsChecklist(n) {
		return Checklist, nil
	}
	switch strings.ToLower(n) {
	case Long, "memory.md", "memory":
		return Long, nil
	case "today":
		return s.Today(), nil
	case "yesterday":
		return s.Yesterday(), nil
	}
	d := strings.TrimPrefix(n, DailyPrefix)
	if f, ok := strings.CutPrefix(n, "memory/"); ok {
		d = strings.TrimSuffix(f, ".md")
	}
	if t, err := time.Parse(dateLayout, d); err == nil && t.Format(dateLayout) == d {
		return DailyPrefix + d, nil
	}
	return "", errorf(ErrInvalid, "no memory document %q: want long, today, yesterday, a date such as %s, or checklist", name, s.now().In(s.loc).Format(dateLayout))
}

// IsChecklist reports whether name is the heartbeat's checklist
// (checklist or HEARTBEAT.md, any case, as Resolve reads it).
func IsChecklist(name string) bool {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case Checklist, "heartbeat.md":
		return true
	}
	return false
}

// FileOf returns the Markdown file name of the document key.
func FileOf(key string) string {
	switch {
	case key == Long:
		return "MEMORY.md"
	case key == Checklist:
		return "HEARTBEAT.md"
	case strings.HasPrefix(key, DailyPrefix):
		return "memory/" + strings.TrimPrefix(key, DailyPrefix) + ".md"
	}
	return key
}

// title is how messages name the document key.
func (s *Store) title(key string) string {
	switch key {
	case Long:
		return "long-term memory (MEMORY.md)"
	case Checklist:
		return "the checklist (HEARTBEAT.md)"
	case s.Today():
		return "today's log (" + FileOf(key) + ")"
	}
	return "the log " + FileOf(key)
}

func docOf(key string, rec record, rev uint64) Doc {
	return Doc{Name: key, File: FileOf(key), Text: rec.Text, Bytes: len(rec.Text), Revision: rev, Updated: rec.Updated, By: rec.By}
}

// Read returns the document called name (see Resolve). A document that
// does not exist is ErrNotFound.
func (s *Store) Read(ctx context.Context, name string) (Doc, error) {
	key, err := s.Resolve(name)
	if err != nil {
		return Doc{}, err
	}
	return s.get(ctx, key)
}

func (s *Store) get(ctx context.Context, key string) (Doc, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Doc{Name: key, File: FileOf(key)}, errorf(ErrNotFound, "%s is empty: nothing was written to it yet", s.title(key))
	}
	if err != nil {
		return Doc{}, fmt.Errorf("memory: read %s: %w", key, err)
	}
	rec, err := decode(key, e.Value(), e.Revision())
	return docOf(key, rec, e.Revision()), err
}

// List returns every document, without its text, sorted by name.
func (s *Store) List(ctx context.Context) ([]Doc, error) {
	keys, err := s.bus.Keys(ctx, s.kv, ">")
	if err != nil {
		return nil, fmt.Errorf("memory: list: %w", err)
	}
	out := make([]Doc, 0, len(keys))
	for _, k := range keys {
		d, err := s.get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue // deleted or expired meanwhile
		}
		if err != nil {
			return nil, err
		}
		d.Text = ""
		out = append(out, d)
	}
	return out, ctx.Err()
}

// History returns the kept revisions of the document called name, newest
// first.
func (s *Store) History(ctx context.Context, name string) ([]Doc, error) {
	key, err := s.Resolve(name)
	if err != nil {
		return nil, err
	}
	es, err := s.kv.History(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errorf(ErrNotFound, "%s has no revisions", s.title(key))
	}
	if err != nil {
		return nil, fmt.Errorf("memory: history of %s: %w", key, err)
	}
	var out []Doc
	for i := len(es) - 1; i >= 0; i-- {
		e := es[i]
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		rec, err := decode(key, e.Value(), e.Revision())
		if err != nil {
			return nil, err
		}
		out = append(out, docOf(key, rec, e.Revision()))
	}
	return out, nil
}

// Append adds a timestamped entry to today's log, headed by who wrote it
// (by, e.g. "heartbeat/default, run 0191..."). text is at most MaxEntry
// bytes, and the log at most MaxDoc. Concurrent appends all land. A line
// of text that reads as a heading, of any level and in any shape, is
// stored escaped as text (escapeHeadings): the entry's header, and the
// day's title, are written by the runtime alone.
func (s *Store) Append(ctx context.Context, by, text string) (Doc, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return Doc{}, errorf(ErrInvalid, "the entry is empty: write what to remember")
	}
	if len(text) > MaxEntry {
		return Doc{}, errorf(ErrTooLarge, "the entry is %d bytes, more than %d: write a shorter note (the gist, not the data)", len(text), MaxEntry)
	}
	now := s.now().In(s.loc)
	key := DailyPrefix + now.Format(dateLayout)
	entry := fmt.Sprintf("## %s · %s\n\n%s\n", now.Format("15:04:05 MST"), oneLine(by), escapeHeadings(text, 0))
	add := func(rec *record, found bool) (bool, error) {
		if !found || strings.TrimSpace(rec.Text) == "" {
			rec.Text = "# " + now.Format(dateLayout) + "\n"
		}
		next := strings.TrimRight(rec.Text, "\n") + "\n\n" + entry
		if len(next) > MaxDoc {
			return false, errorf(ErrTooLarge, "%s would be %d bytes, more than %d: it takes no more entries today; put what lasts into long-term memory with memory_replace", s.title(key), len(next), MaxDoc)
		}
		rec.Text, rec.Updated, rec.By = next, now.UTC(), by
		return true, nil
	}
	return s.write(ctx, key, add)
}

// Replace sets the "## section" of long-term memory to text (a section
// that is missing is added at the end; an empty text removes it). text is
// at most MaxEntry bytes, and long-term memory at most MaxDoc. A "# " or
// "## " heading line in text is refused; a line a reader may still take
// for one (indented, after an invisible character or an unusual line
// break, with a look-alike #, without the space) is stored escaped as
// text (escapeHeadings).
func (s *Store) Replace(ctx context.Context, by, section, text string) (Doc, error) {
	section = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(section), "#"))
	switch {
	case section == "":
		return Doc{}, errorf(ErrInvalid, "the section has no title: name it, e.g. \"People\" for the section \"## People\"")
	case strings.ContainsFunc(section, isBreak) || len(section) > 120:
		return Doc{}, errorf(ErrInvalid, "the section title is one line of at most 120 bytes")
	}
	text = strings.TrimSpace(text)
	if len(text) > MaxEntry {
		return Doc{}, errorf(ErrTooLarge, "the section's text is %d bytes, more than %d: keep the facts that last, in short lines, or split them into sections", len(text), MaxEntry)
	}
	for l := range strings.Lines(text) {
		if strings.HasPrefix(l, "# ") || strings.HasPrefix(l, "## ") {
			return Doc{}, errorf(ErrInvalid, "the section's text has a heading line (%q): a section holds no # or ## headings; set each section with its own memory_replace (### and deeper are fine)", strings.TrimSpace(l))
		}
	}
	text = escapeHeadings(text, 2)
	now := s.now()
	set := func(rec *record, _ bool) (bool, error) {
		next := replaceSection(rec.Text, section, text)
		if len(next) > MaxDoc {
			return false, errorf(ErrTooLarge, "%s would be %d bytes, more than %d: shorten or merge other sections first (memory_read long shows them)", s.title(Long), len(next), MaxDoc)
		}
		rec.Text, rec.Updated, rec.By = next, now.UTC(), by
		return true, nil
	}
	return s.write(ctx, Long, set)
}

// Put replaces the whole document called name with text, written by by.
// With rev not nil it is a compare-and-set: it writes only while the
// document is at *rev (0: does not exist), else returns a ErrConflict that
// names the revision it is at. text is at most MaxDoc bytes.
func (s *Store) Put(ctx context.Context, name, text, by string, rev *uint64) (Doc, error) {
	key, err := s.Resolve(name)
	if err != nil {
		return Doc{}, err
	}
	if len(text) > MaxDoc {
		return Doc{}, errorf(ErrTooLarge, "%s would be %d bytes, more than %d: shorten it", s.title(key), len(text), MaxDoc)
	}
	rec := record{Text: text, Updated: s.now().UTC(), By: by}
	if rev == nil {
		return s.write(ctx, key, func(cur *record, _ bool) (bool, error) {
			*cur = rec
			return true, nil
		})
	}
	ttl, err := s.ttl(key)
	if err != nil {
		return Doc{}, err
	}
	// Written at *rev; Update's fn runs only when that conflicted.
	conflict := func(*record, bool) (bool, error) { return false, ErrConflict }
	var got uint64
	if ttl > 0 {
		_, got, err = bus.UpdateAtExpiring(ctx, s.bus, s.kv, key, rec, *rev, ttl, conflict)
	} else {
		_, got, err = bus.UpdateAt(ctx, s.kv, key, rec, *rev, conflict)
	}
	if errors.Is(err, ErrConflict) {
		return Doc{}, errorf(ErrConflict, "%s changed since revision %d was read (it is at revision %d now): read it again and redo the change", s.title(key), *rev, got)
	}
	if err != nil {
		return Doc{}, s.wrap(key, err)
	}
	return docOf(key, rec, got), nil
}

// write is the read-modify-write of key with fn (bus.Update); a daily
// log is written with its expiry (bus.UpdateAtExpiring, guessing that it
// does not exist yet: the first entry of the day costs one round trip).
func (s *Store) write(ctx context.Context, key string, fn func(*record, bool) (bool, error)) (Doc, error) {
	ttl, err := s.ttl(key)
	if err != nil {
		return Doc{}, err
	}
	var rec record
	var rev uint64
	if ttl > 0 {
		var first record
		if _, err := fn(&first, false); err != nil {
			return Doc{}, err
		}
		rec, rev, err = bus.UpdateAtExpiring(ctx, s.bus, s.kv, key, first, 0, ttl, fn)
	} else {
		rec, rev, err = bus.Update(ctx, s.kv, key, fn)
	}
	if err != nil {
		return Doc{}, s.wrap(key, err)
	}
	return docOf(key, rec, rev), nil
}

// wrap returns err, or for an error of the store's own its detail.
func (s *Store) wrap(key string, err error) error {
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	s.bus.NoteWrite(err)
	return fmt.Errorf("memory: write %s: %w", key, err)
}

// ttl is how long a write of key keeps it: for a daily log, until
// keep_days after the end of its day; 0 for the documents that stay.
func (s *Store) ttl(key string) (time.Duration, error) {
	d, ok := strings.CutPrefix(key, DailyPrefix)
	if !ok {
		return 0, nil
	}
	day, err := time.ParseInLocation(dateLayout, d, s.loc)
	if err != nil {
		return 0, errorf(ErrInvalid, "%q is no daily log (want daily.YYYY-MM-DD)", key)
	}
	ttl := day.AddDate(0, 0, 1).Add(s.keep).Sub(s.now())
	if ttl < time.Second {
		return 0, errorf(ErrInvalid, "the log of %s is older than memory.keep_days (%d days): it would expire at once", d, s.cfg.KeepDays)
	}
	return ttl, nil
}

func decode(key string, data []byte, rev uint64) (record, error) {
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, &bus.CorruptError{Key: key, Revision: rev, Err: err}
	}
	return rec, nil
}

// oneLine folds white space: a header line stays one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
