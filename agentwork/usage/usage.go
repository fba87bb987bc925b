// Package usage sums the model tokens of runs per day, source, name (the
// cron job, the heartbeat, the task) and model, and answers what they cost.
//
// The sums live in the agentwork_usage bucket, one key per UTC day, source,
// name and model, kept bus.UsageTTL after its last change. They are folded
// off the runs' path: a Folder consumes the run events (done, skip, error)
// of the events stream through one durable consumer that every instance
// shares, and adds each event's usage to its key exactly once (see Folder).
// Query reads them back, summed by the dimensions asked for.
package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/agentwork/agentwork/bus"
)

// DayLayout is how a day is written: the UTC date of the run's event.
const DayLayout = "2006-01-02"

// Record is one key of agentwork_usage: what the runs of one source and
// name spent on one model on one (UTC) day.
type Record struct {
	Day    string `json:"day"`
	Source string `json:"source"`
	Name   string `json:"name"`
	Model  string `json:"model"`
	// Runs counts the run events that carried a usage.
	Runs         int64 `json:"runs"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CachedInputTokens is the part of InputTokens read from the
	// provider's prompt cache, where the provider reports it.
	CachedInputTokens int64 `json:"cached_input_tokens,omitempty"`

	// Floor and Seqs make the fold exactly once: every run event of the
	// events stream at or below Floor has been folded (the shared
	// consumer's ack floor when last written), and Seqs are the stream
	// sequences above it folded into this record.
	Floor uint64   `json:"floor,omitempty"`
	Seqs  []uint64 `json:"seqs,omitempty"`
}

// Total is input plus output tokens.
func (r Record) Total() int64 { return r.InputTokens + r.OutputTokens }

// Key is the record's key: <day>.<source>.<name>.<model>, each part with
// what a key may not hold (and dots) escaped as =XX.
func Key(day, source, name, modelName string) string {
	return day + "." + escapeToken(source) + "." + escapeToken(name) + "." + escapeToken(modelName)
}

// escapeToken keeps A-Z a-z 0-9 - _ and writes any other byte as =XX, so
// that a model name like "llama3:8b" or "gpt-4.1" is one key token.
func escapeToken(s string) string {
	if s == "" {
		return "="
	}
	var b strings.Builder
	for i := range len(s) {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "=%02X", c)
		}
	}
	return b.String()
}

// Dimensions a Query sums by.
const (
	ByDay    = "day"
	BySource = "source"
	ByName   = "name"
	ByModel  = "model"
)

// Filter selects and groups records.
type Filter struct {
	// Since: records of the days from the UTC date of Since on. Zero: all
	// that are kept.
	Since time.Time `json:"since,omitzero"`
	// Source and Name, if set, keep only records of that source / name.
	Source string `json:"source,omitempty"`
	Name   string `json:"name,omitempty"`
	// By are the dimensions to keep (day, source, name, model); the others
	// are summed over and left empty. Empty: all four.
	By []string `json:"by,omitempty"`
}

// ErrBadFilter is wrapped by the error of a Filter that cannot be used.
var ErrBadFilter = errors.New("usage: bad filter")

// ParseFilter builds a filter from its text form, as the CLI flags and
// the HTTP query give it: since a number of days ("7d": today and the six
// days before, in UTC) or a duration back from now ("36h", from the start
// of that UTC day), by a comma-separated list of dimensions. Errors wrap
// ErrBadFilter.
func ParseFilter(since, source, name, by string, now time.Time) (Filter, error) {
	f := Filter{Source: source, Name: name}
	var err error
	if f.Since, err = ParseSince(since, now); err != nil {
		return f, err
	}
	if !f.Since.IsZero() {
		y, m, d := f.Since.UTC().Date()
		f.Since = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	}
	f.By, err = ParseBy(by)
	return f, err
}

// ParseBy parses a comma-separated list of dimensions ("day,source").
func ParseBy(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var by []string
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		switch p {
		case ByDay, BySource, ByName, ByModel:
			by = append(by, p)
		default:
			return nil, fmt.Errorf("%w: by %q: want day, source, name or model (or a comma-separated list of them)", ErrBadFilter, p)
		}
	}
	return by, nil
}

// ParseSince parses a look-back: a number of days ("7d") or a Go
// duration ("36h"), measured back from now.
func ParseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		var days int
		if _, err := fmt.Sscanf(n, "%d", &days); err == nil && days > 0 && fmt.Sprint(days) == n {
			return now.AddDate(0, 0, -(days - 1)), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%w: since %q: want a number of days (7d: today and the 6 days before) or a duration (36h)", ErrBadFilter, s)
	}
	return now.Add(-d), nil
}

// Query returns the records of the usage bucket that f selects, summed by f.By, sorted
// by day (newest first), then source, name and model. Seqs and Floor are
// left out.
func Query(ctx context.Context, b *bus.Bus, f Filter) ([]Record, error) {
	keep := map[string]bool{}
	for _, d := range f.By {
		switch d {
		case ByDay, BySource, ByName, ByModel:
			keep[d] = true
		default:
			return nil, fmt.Errorf("%w: by %q: want day, source, name or model", ErrBadFilter, d)
		}
	}
	if len(keep) == 0 {
		keep = map[string]bool{ByDay: true, BySource: true, ByName: true, ByModel: true}
	}
	since := ""
	if !f.Since.IsZero() {
		since = f.Since.UTC().Format(DayLayout)
	}
	all, err := b.Latest(ctx, b.Usage, ">", false)
	if err != nil {
		return nil, fmt.Errorf("usage: read %s: %w", bus.BucketUsage, err)
	}
	sums := map[[4]string]*Record{}
	for _, e := range all {
		var r Record
		if err := json.Unmarshal(e.Value(), &r); err != nil {
			continue // not a record: nothing to count
		}
		if r.Day < since || (f.Source != "" && r.Source != f.Source) || (f.Name != "" && r.Name != f.Name) {
			continue
		}
		k := [4]string{r.Day, r.Source, r.Name, r.Model}
		for i, d := range []string{ByDay, BySource, ByName, ByModel} {
			if !keep[d] {
				k[i] = ""
			}
		}
		s := sums[k]
		if s == nil {
			s = &Record{Day: k[0], Source: k[1], Name: k[2], Model: k[3]}
			sums[k] = s
		}
		s.Runs += r.Runs
		s.InputTokens += r.InputTokens
		s.OutputTokens += r.OutputTokens
		s.CachedInputTokens += r.CachedInputTokens
	}
	out := make([]Record, 0, len(sums))
	for _, s := range sums {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.Day != b.Day:
			return a.Day > b.Day
		case a.Source != b.Source:
			return a.Source < b.Source
		case a.Name != b.Name:
			return a.Name < b.Name
		}
		return a.Model < b.Model
	})
	return out, nil
}
