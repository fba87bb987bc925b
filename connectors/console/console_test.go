package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/console"
)

// consoleDest is the console's destination: a terminal that records the
// bytes written and parses them back into messages the way a reader sees
// them. It can be made to fail the next write (a closed pipe).
type consoleDest struct {
	json    bool
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  int
	fail    bool
	changed chan struct{}
}

var (
	_ connectortest.Observer      = (*consoleDest)(nil)
	_ connectortest.FaultInjector = (*consoleDest)(nil)
)

func (d *consoleDest) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail {
		d.fail = false
		return 0, syscall.EPIPE
	}
	d.writes++
	d.buf.Write(p)
	if d.changed != nil {
		close(d.changed)
		d.changed = nil
	}
	return len(p), nil
}

func (d *consoleDest) Inject(f connectortest.Fault) {
	if f.Kind != connectortest.Unavailable {
		panic(fmt.Sprintf("console destination cannot %s", f.Kind))
	}
	d.mu.Lock()
	d.fail = true
	d.mu.Unlock()
}

func (d *consoleDest) Messages(ctx context.Context, n int) ([]connectortest.Message, error) {
	for {
		d.mu.Lock()
		out := d.buf.String()
		msgs, err := parseConsole(out, d.json)
		if err != nil {
			d.mu.Unlock()
			return msgs, fmt.Errorf("console output %q: %w", out, err)
		}
		if len(msgs) >= n {
			d.mu.Unlock()
			return msgs, nil
		}
		if d.changed == nil {
			d.changed = make(chan struct{})
		}
		ch := d.changed
		d.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return msgs, ctx.Err()
		}
	}
}

var consoleHeader = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d  \[[^\]]*\] `)

// parseConsole reads the text (or JSON) form back into messages: a line
// that starts with a time stamp starts a notification, the lines after it
// continue its text with the header's indentation removed.
func parseConsole(out string, isJSON bool) ([]connectortest.Message, error) {
	if out == "" {
		return nil, nil
	}
	if !strings.HasSuffix(out, "\n") {
		return nil, errors.New("output does not end in a newline")
	}
	var msgs []connectortest.Message
	if isJSON {
		for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			var n connectors.Notification
			if err := json.Unmarshal([]byte(line), &n); err != nil {
				return msgs, fmt.Errorf("line %d: %w", i+1, err)
			}
			msgs = append(msgs, connectortest.Message{Text: n.Text, Urgency: n.Urgency, ID: n.ID})
		}
		return msgs, nil
	}
	indent := ""
	for i, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if h := consoleHeader.FindString(line); h != "" {
			indent = strings.Repeat(" ", len(h))
			m := connectortest.Message{Text: line[len(h):], Urgency: "info"}
			if rest, ok := strings.CutPrefix(m.Text, "⚠ important: "); ok {
				m.Text, m.Urgency = rest, "important"
			}
			msgs = append(msgs, m)
			continue
		}
		if len(msgs) == 0 {
			return nil, fmt.Errorf("line %d %q: want a time stamp first", i+1, line)
		}
		last := &msgs[len(msgs)-1]
		if line == "" {
			last.Text += "\n"
			continue
		}
		rest, ok := strings.CutPrefix(line, indent)
		if !ok {
			return msgs, fmt.Errorf("line %d %q: continuation not indented by %d", i+1, line, len(indent))
		}
		last.Text += "\n" + rest
	}
	return msgs, nil
}

func consoleHarness(format string) connectortest.Harness {
	return connectortest.Harness{
		New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
			d := &consoleDest{json: format == console.FormatJSON}
			c, err := console.New(d, console.Options{Format: format, Location: time.UTC})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return c, d
		},
		Features: connectortest.Features{
			Concurrent: true,
			Outages:    true,
			KeepsID:    format == console.FormatJSON,
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, format := range []string{console.FormatText, console.FormatJSON} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			connectortest.Run(t, consoleHarness(format))
		})
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 21, 9, 0, 3, 0, time.UTC)
	now := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	pad30 := strings.Repeat(" ", len("2026-11-21 09:00:03  [cron/r] "))
	for _, tc := range []struct {
		name string
		n    connectors.Notification
		loc  *time.Location
		want string
	}{
		{
			name: "important",
			n:    connectors.Notification{Source: "heartbeat", Name: "default", Text: "Disk /var is 95% full", Urgency: "important", Time: at},
			want: "2026-11-21 09:00:03  [heartbeat/default] ⚠ important: Disk /var is 95% full\n",
		},
		{
			name: "info",
			n:    connectors.Notification{Source: "cron", Name: "sales", Text: "Sales up 5%", Urgency: "info", Time: at},
			want: "2026-11-21 09:00:03  [cron/sales] Sales up 5%\n",
		},
		{
			name: "no urgency, no name",
			n:    connectors.Notification{Source: "task", Text: "done", Time: at},
			want: "2026-11-21 09:00:03  [task] done\n",
		},
		{
			name: "other urgency is shown",
			n:    connectors.Notification{Source: "task", Name: "x", Text: "hm", Urgency: "critical", Time: at},
			want: "2026-11-21 09:00:03  [task/x] critical: hm\n",
		},
		{
			name: "multi-line text is indented under the first line",
			n:    connectors.Notification{Source: "cron", Name: "r", Text: "Report:\n- a\n\n  b", Time: at},
			want: "2026-11-21 09:00:03  [cron/r] Report:\n" + pad30 + "- a\n\n" + pad30 + "  b\n",
		},
		{
			name: "a reply the token limit cut short says so",
			n:    connectors.Notification{Source: "task", Name: "t", Text: "Sales fell because the", Truncated: true, Time: at},
			want: "2026-11-21 09:00:03  [task/t] Sales fell because the [cut short by the model's token limit]\n",
		},
		{
			name: "CRLF becomes LF",
			n:    connectors.Notification{Source: "cron", Name: "r", Text: "a\r\nb", Time: at},
			want: "2026-11-21 09:00:03  [cron/r] a\n" + pad30 + "b\n",
		},
		{
			name: "terminal escapes are shown, not obeyed",
			n:    connectors.Notification{Source: "task", Name: "t", Text: "\x1b[2J\x1b]0;pwned\x07red\rover\u202eevil\x00", Time: at},
			want: `2026-11-21 09:00:03  [task/t] \x1b[2J\x1b]0;pwned\x07red\x0dover\u202eevil\x00` + "\n",
		},
		{
			name: "invalid UTF-8",
			n:    connectors.Notification{Source: "task", Name: "t", Text: "a\xffb", Time: at},
			want: "2026-11-21 09:00:03  [task/t] a\uFFFDb\n",
		},
		{
			name: "time in the configured zone",
			n:    connectors.Notification{Source: "task", Name: "t", Text: "x", Time: at},
			loc:  time.FixedZone("CET", 3600),
			want: "2026-11-21 10:00:03  [task/t] x\n",
		},
		{
			name: "no time: now",
			n:    connectors.Notification{Source: "task", Name: "t", Text: "x"},
			want: "2027-01-02 03:04:05  [task/t] x\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			loc := tc.loc
			if loc == nil {
				loc = time.UTC
			}
			c, err := console.New(&buf, console.Options{Location: loc, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Send(t.Context(), tc.n); err != nil {
				t.Fatalf("Send = %v", err)
			}
			if got := buf.String(); got != tc.want {
				t.Errorf("Send(%q) wrote\n%q\nwant\n%q", tc.n.Text, got, tc.want)
			}
		})
	}
}

func TestJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	c, err := console.New(&buf, console.Options{Format: console.FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	n := connectortest.Notification("a < b & c\nsecond line")
	n.Metadata = map[string]string{"k": "v"}
	if _, err := c.Send(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("JSON output %q: want exactly one line", out)
	}
	if strings.Contains(out, `\u003c`) {
		t.Errorf("JSON output %q escapes < as \\u003c; want it readable", out)
	}
	var got connectors.Notification
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("JSON output %q: %v", out, err)
	}
	if !got.Time.Equal(n.Time) {
		t.Errorf("time = %v, want %v", got.Time, n.Time)
	}
	got.Time = n.Time
	if !reflect.DeepEqual(got, n) {
		t.Errorf("JSON line decodes to %+v, want %+v", got, n)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	if _, err := console.New(nil, console.Options{Format: "yaml"}); err == nil || !strings.Contains(err.Error(), "want text or json") {
		t.Errorf("New(format yaml) = %v, want an error naming text and json", err)
	}
	d := &consoleDest{}
	c, err := console.New(d, console.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d.Inject(connectortest.Fault{Kind: connectortest.Unavailable})
	_, err = c.Send(t.Context(), connectortest.Notification("x"))
	if !errors.Is(err, syscall.EPIPE) || connectors.IsPermanent(err) {
		t.Errorf("Send on a broken pipe = %v, want a retryable error wrapping EPIPE", err)
	}
}

// TestOneWritePerNotification: concurrent sends to a shared stdout
// must not interleave, so each notification is one Write.
func TestOneWritePerNotification(t *testing.T) {
	t.Parallel()
	d := &consoleDest{}
	c, err := console.New(d, console.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(t.Context(), connectortest.Notification("one\ntwo\nthree")); err != nil {
		t.Fatal(err)
	}
	if d.writes != 1 {
		t.Errorf("a three-line notification took %d writes, want 1", d.writes)
	}
}

func FuzzRoundTrip(f *testing.F) {
	for _, s := range connectortest.Texts() {
		f.Add(s, true)
	}
	f.Add("a\n\nb\n", false)
	f.Add("  leading\n\ttab", false)
	f.Fuzz(func(t *testing.T, text string, important bool) {
		var buf bytes.Buffer
		c, err := console.New(&buf, console.Options{Location: time.UTC})
		if err != nil {
			t.Fatal(err)
		}
		n := connectortest.Notification(text)
		if important {
			n.Urgency = "important"
		}
		if _, err := c.Send(context.Background(), n); err != nil {
			t.Fatal(err)
		}
		msgs, err := parseConsole(buf.String(), false)
		if err != nil {
			t.Fatalf("Send(%q) wrote %q, which does not parse: %v", text, buf.String(), err)
		}
		if len(msgs) != 1 {
			t.Fatalf("Send(%q) wrote %q: %d notifications, want 1", text, buf.String(), len(msgs))
		}
		// What a reader sees: valid UTF-8, CRLF as LF, control characters escaped.
		clean := strings.ReplaceAll(strings.ToValidUTF8(text, "\uFFFD"), "\r\n", "\n")
		if strings.ContainsFunc(clean, func(r rune) bool {
			return r != '\n' && r != '\t' && (r < 0x20 || (r >= 0x7f && r < 0xa0) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069))
		}) {
			if strings.ContainsFunc(msgs[0].Text, func(r rune) bool { return r == 0x1b || r == '\r' || r == 0x9b }) {
				t.Fatalf("Send(%q) wrote a raw terminal control character: %q", text, buf.String())
			}
			return
		}
		if !important && strings.HasPrefix(clean, "⚠ important: ") {
			return // reads as important; the console has no other way to say it
		}
		if msgs[0].Text != clean {
			t.Fatalf("Send(%q) reads back as %q", text, msgs[0].Text)
		}
	})
}

func ExampleNew() {
	c, err := console.New(os.Stdout, console.Options{Location: time.UTC})
	if err != nil {
		panic(err)
	}
	_, _ = c.Send(context.Background(), connectors.Notification{
		Source: "heartbeat", Name: "default", Urgency: "important",
		Text: "Disk /var is 95% full\nLargest: /var/log/journal (41 GB)",
		Time: time.Date(2026, 11, 21, 9, 0, 3, 0, time.UTC),
	})
	// Output:
	// 2026-11-21 09:00:03  [heartbeat/default] ⚠ important: Disk /var is 95% full
	//                                          Largest: /var/log/journal (41 GB)
}
