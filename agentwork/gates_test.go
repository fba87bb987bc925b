package agentwork_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools"
)

func TestNormalizeText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"Disk full!", "disk full"},
		{"  disk \n\t FULL  ", "disk full"},
		{"¡Disco lleno!", "disco lleno"},
		{"3 of 4 jobs failed: backup, sync.", "3 of 4 jobs failed: backup, sync"},
		{"...", ""},
		{"", ""},
	}
	for _, tt := range tests {
		if got := agentwork.NormalizeText(tt.in); got != tt.want {
			t.Errorf("NormalizeText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestDedupKey(t *testing.T) {
	t.Parallel()
	same := [][2]string{{"Disk full!", "disk  full"}, {"Backup failed.", "backup FAILED"}}
	for _, p := range same {
		if a, b := agentwork.DedupKey("heartbeat", p[0]), agentwork.DedupKey("heartbeat", p[1]); a != b {
			t.Errorf("DedupKey(%q) = %s, DedupKey(%q) = %s; want the same key", p[0], a, p[1], b)
		}
	}
	if a, b := agentwork.DedupKey("heartbeat", "disk full"), agentwork.DedupKey("cron", "disk full"); a == b {
		t.Errorf("DedupKey of two sources = %s for both; want different keys", a)
	}
	if a, b := agentwork.DedupKey("heartbeat", "disk full"), agentwork.DedupKey("heartbeat", "disk empty"); a == b {
		t.Errorf("DedupKey of two texts = %s for both; want different keys", a)
	}
}

func TestModeGate(t *testing.T) {
	t.Parallel()
	notify := agentwork.Output{Text: "prose", Calls: []tools.Call{{Name: tools.NotifyName, Arguments: `{"text":"note"}`, Result: "ok"}}}
	tests := []struct {
		name    string
		def     string
		deliver string
		out     agentwork.Output
		text    string // delivered; "" = nothing
		reason  string // skip reason; "" = no skip
	}{
		{name: "default reply", def: agentwork.DeliverReply, out: notify, text: "prose"},
		{name: "request asks notify", def: agentwork.DeliverReply, deliver: agentwork.DeliverNotify, out: notify, text: "note"},
		{name: "default notify without a call", def: agentwork.DeliverNotify, out: agentwork.Output{Text: "fine"}, reason: agentwork.ReasonAck},
		{name: "none delivers nothing", def: agentwork.DeliverReply, deliver: agentwork.DeliverNone, out: notify},
		{name: "blank reply", def: agentwork.DeliverReply, out: agentwork.Output{Text: " \n"}, reason: agentwork.ReasonEmpty},
		{name: "empty default is reply", out: agentwork.Output{Text: " hi "}, text: "hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := &agentwork.Run{ID: "r", Request: agentwork.Request{Source: "cron", Name: "x", Deliver: tt.deliver}}
			err := agentwork.ModeGate{Default: tt.def}.Inspect(t.Context(), run, tt.out)
			s, skipped := agentwork.AsSkip(err)
			switch {
			case tt.reason != "":
				if !skipped || s.Reason != tt.reason {
					t.Fatalf("Inspect = %v, want skip %q", err, tt.reason)
				}
			case err != nil:
				t.Fatalf("Inspect = %v, want nil", err)
			}
			got := ""
			if run.Notice != nil {
				got = run.Notice.Text
			}
			if got != tt.text {
				t.Errorf("delivered %q, want %q", got, tt.text)
			}
		})
	}
}

func TestDedupGate(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	gate := &agentwork.DedupGate{KV: b.Dedup, Window: time.Hour}
	inspect := func(runID, source, name, text, window string, targets ...string) (*agentwork.Run, error) {
		run := &agentwork.Run{ID: runID, Request: agentwork.Request{Source: source, Name: name, DedupWindow: window}, Targets: targets, Notice: &agentwork.Notice{Text: text}}
		g := gate
		if window != "" {
			g = &agentwork.DedupGate{KV: b.Dedup} // off unless the request says
		}
		return run, g.Inspect(t.Context(), run, agentwork.Output{})
	}
	tests := []struct {
		run, source, name, text string
		targets                 []string
		window                  string
		reason                  string
	}{
		{"r1", "heartbeat", "x", "Disk full!", []string{"ops", "chat"}, "", ""},
		{"r2", "heartbeat", "x", "disk full", []string{"chat", "ops"}, "", agentwork.ReasonDuplicate},
		{"r1", "heartbeat", "x", "disk full", []string{"ops", "chat"}, "", ""}, // the run that took the key, retried
		{"r3", "cron", "x", "disk full", []string{"ops", "chat"}, "", ""},      // another source
		{"r4", "heartbeat", "x", "disk empty", []string{"ops", "chat"}, "", ""},
		{"r5", "heartbeat", "x", "disk full", []string{"pager"}, "", ""},       // another destination is not held back
		{"r6", "heartbeat", "y", "disk full", []string{"ops", "chat"}, "", ""}, // another name
		// A request's own window, where the source has none.
		{"t1", "task", "report", "sales fell", []string{"ops"}, "1h", ""},
		{"t2", "task", "report", "Sales fell.", []string{"ops"}, "1h", agentwork.ReasonDuplicate},
	}
	for _, tt := range tests {
		run, err := inspect(tt.run, tt.source, tt.name, tt.text, tt.window, tt.targets...)
		if s, ok := agentwork.AsSkip(err); tt.reason != "" {
			if !ok || s.Reason != tt.reason {
				t.Errorf("run %s %s %q: Inspect = %v, want skip %q", tt.run, tt.source, tt.text, err, tt.reason)
			}
			continue
		}
		if err != nil {
			t.Errorf("run %s %s %q: Inspect = %v, want nil", tt.run, tt.source, tt.text, err)
			continue
		}
		if want := agentwork.NoticeKey(tt.source, tt.name, tt.targets, tt.text); run.Notice.DedupKey != want {
			t.Errorf("run %s: DedupKey = %q, want %q", tt.run, run.Notice.DedupKey, want)
		}
	}

	// Nothing to deliver, or dedup off: the gate does nothing.
	run := &agentwork.Run{ID: "r5", Request: agentwork.Request{Source: "heartbeat"}}
	if err := gate.Inspect(t.Context(), run, agentwork.Output{}); err != nil || run.Notice != nil {
		t.Errorf("Inspect without a notice = %v, notice %+v; want nil, nil", err, run.Notice)
	}
	off := &agentwork.DedupGate{KV: b.Dedup}
	run = &agentwork.Run{ID: "r6", Request: agentwork.Request{Source: "heartbeat"}, Notice: &agentwork.Notice{Text: "Disk full!"}}
	if err := off.Inspect(t.Context(), run, agentwork.Output{}); err != nil || run.Notice.DedupKey != "" {
		t.Errorf("Inspect with Window 0 = %v, key %q; want nil and no key", err, run.Notice.DedupKey)
	}
}

func TestSkipAndDefer(t *testing.T) {
	t.Parallel()
	err := errors.Join(errors.New("context"), agentwork.Skip(agentwork.ReasonBusy, "job x"))
	if s, ok := agentwork.AsSkip(err); !ok || s.Reason != agentwork.ReasonBusy || s.Detail != "job x" {
		t.Errorf("AsSkip(%v) = %+v, %v; want busy / job x", err, s, ok)
	}
	if _, ok := agentwork.AsSkip(agentwork.Defer(time.Second, "later")); ok {
		t.Error("AsSkip(Defer(...)) = true, want false")
	}
	var d *agentwork.DeferError
	if !errors.As(agentwork.Defer(time.Second, "later"), &d) || d.After != time.Second {
		t.Errorf("Defer(1s) = %+v, want a *DeferError after 1s", d)
	}
}
