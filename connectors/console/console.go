// Package console is the connector that prints notifications to a terminal
// or log, one readable line each (or one JSON line): the connector of the
// quick start.
package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
)

// The formats of a console.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// TimeLayout is the time stamp at the start of a text line.
const TimeLayout = "2006-01-02 15:04:05"

// Options configures a Connector.
type Options struct {
	// Format is "text" (default): one readable line per notification,
	//
	//	2026-11-21 09:00:03  [heartbeat/default] ⚠ important: Disk /var is 95% full
	//
	// with the further lines of a multi-line text indented under the first;
	// or "json": the Notification as one JSON line.
	Format string
	// Location of the time stamps. Default time.Local.
	Location *time.Location
	// Now stamps notifications that carry no time. Default time.Now.
	Now func() time.Time
}

// Connector prints notifications to a terminal or log. Each notification
// is written with one Write call, so lines of concurrent sends never
// interleave. Safe for concurrent use.
//
// Control characters other than newline and tab (a model's text may carry
// terminal escape sequences) are shown escaped, like \x1b.
type Connector struct {
	w    io.Writer
	json bool
	loc  *time.Location
	now  func() time.Time
	mu   sync.Mutex
}

var _ connectors.Connector = (*Connector)(nil)

// New returns a Connector writing to w (os.Stdout when nil).
func New(w io.Writer, opts Options) (*Connector, error) {
	if w == nil {
		w = os.Stdout
	}
	c := &Connector{w: w, loc: opts.Location, now: opts.Now}
	switch opts.Format {
	case "", FormatText:
	case FormatJSON:
		c.json = true
	default:
		return nil, fmt.Errorf("console: format %q: want text or json", opts.Format)
	}
	if c.loc == nil {
		c.loc = time.Local
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Send writes n. It cannot be interrupted once the write has started (a
// terminal does not block for long); a ctx already done writes nothing.
func (c *Connector) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, err
	}
	if n.Time.IsZero() {
		n.Time = c.now()
	}
	var line []byte
	if c.json {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(n); err != nil {
			return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("console: encode notification %s: %w", n.ID, err))
		}
		line = buf.Bytes()
	} else {
		line = c.format(n)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.w.Write(line); err != nil {
		return connectors.Receipt{}, fmt.Errorf("console: write: %w", err)
	}
	return connectors.Receipt{Parts: 1}, nil
}

// format renders the text form: time, [source/name], urgency mark, text;
// continuation lines indented to the start of the text.
func (c *Connector) format(n connectors.Notification) []byte {
	where := n.Source
	if where == "" {
		where = "agentwork"
	}
	if n.Name != "" {
		where += "/" + n.Name
	}
	header := n.Time.In(c.loc).Format(TimeLayout) + "  [" + sanitizeLine(where) + "] "
	indent := strings.Repeat(" ", utf8.RuneCountInString(header))
	var b strings.Builder
	b.WriteString(header)
	switch n.Urgency {
	case "", "info":
	case "important":
		b.WriteString("⚠ important: ")
	default:
		b.WriteString(sanitizeLine(n.Urgency) + ": ")
	}
	text := strings.ReplaceAll(strings.ToValidUTF8(n.Text, "\uFFFD"), "\r\n", "\n")
	for i, l := range strings.Split(text, "\n") {
		if i > 0 {
			b.WriteByte('\n')
			if l != "" {
				b.WriteString(indent)
			}
		}
		b.WriteString(sanitizeLine(l))
	}
	if n.Truncated {
		b.WriteString(" [cut short by the model's token limit]")
	}
	b.WriteByte('\n')
	return []byte(b.String())
}

// sanitizeLine escapes control characters (other than tab) in one line, so
// model text cannot move the cursor, recolour or retitle the terminal.
func sanitizeLine(s string) string {
	if strings.IndexFunc(s, isControl) < 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if !isControl(r) {
			b.WriteRune(r)
			continue
		}
		if r < 0x100 {
			fmt.Fprintf(&b, `\x%02x`, r)
		} else {
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func isControl(r rune) bool {
	if r == '\t' {
		return false
	}
	// Cc (C0, DEL, C1) plus the bidirectional overrides and isolates, which
	// can make a line read differently from what it says.
	return unicode.IsControl(r) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}
