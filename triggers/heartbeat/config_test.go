package heartbeat_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/triggers/activehours"
	"github.com/agentwork/agentwork/triggers/budget"
	"github.com/agentwork/agentwork/triggers/heartbeat"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  heartbeat.Config
		want string // "" = valid
	}{
		{"zero is valid", heartbeat.Config{}, ""},
		{"full", heartbeat.Config{Name: "ops", Enabled: true, Every: time.Hour, ActiveHours: activehours.Window{Start: "22:00", End: "06:00", Timezone: "Europe/Berlin", Days: []string{"mon-fri"}}, Targets: []string{"telegram"}, Overlap: "queue", OutputMode: "ok_token", DedupWindow: time.Hour, Timeout: time.Minute}, ""},
		{"bad name", heartbeat.Config{Name: "Daily Check"}, `heartbeat.name: "Daily Check"`},
		{"every too short", heartbeat.Config{Every: 30 * time.Second}, "heartbeat.every: 30s: want at least 1m0s"},
		{"negative every", heartbeat.Config{Every: -time.Minute}, "heartbeat.every: -1m0s"},
		{"bad end", heartbeat.Config{ActiveHours: activehours.Window{Start: "09:00", End: "25:00"}}, `heartbeat.active_hours.end: "25:00" is not a time (want HH:MM, 00:00-24:00)`},
		{"bad zone", heartbeat.Config{ActiveHours: activehours.Window{Start: "09:00", End: "17:00", Timezone: "Berlin"}}, `heartbeat.active_hours.timezone: "Berlin"`},
		{"bad target", heartbeat.Config{Targets: []string{"ok", "Tele gram"}}, `heartbeat.targets[1]: "Tele gram"`},
		{"bad overlap", heartbeat.Config{Overlap: "allow"}, `heartbeat.overlap: "allow": want skip or queue`},
		{"bad mode", heartbeat.Config{OutputMode: "text"}, `heartbeat.output_mode: "text": want notify or ok_token`},
		{"negative dedup", heartbeat.Config{DedupWindow: -time.Hour}, "heartbeat.dedup_window: -1h0m0s: must not be negative"},
		{"tiny timeout", heartbeat.Config{Timeout: time.Millisecond}, "heartbeat.timeout: 1ms: want at least 1s"},
		{"budget", heartbeat.Config{Budget: budget.Budget{DailyTokens: 20000}}, ""},
		{"negative budget", heartbeat.Config{Budget: budget.Budget{DailyTokens: -1}}, "heartbeat.budget.daily_tokens: -1: must not be negative (0: no cap)"},
		{"tools", heartbeat.Config{Tools: []string{"fs__read_text_file", "fs__list_*"}}, ""},
		{"model", heartbeat.Config{Model: "cheap", Fallback: []string{"default"}, MaxSteps: 3}, ""},
		{"negative max_steps", heartbeat.Config{MaxSteps: -1}, "heartbeat.max_steps: -1: must not be negative"},
		{"bad tools glob", heartbeat.Config{Tools: []string{"fs__*", "fs__[read"}}, `heartbeat.tools[1]: "fs__[read" is not a well-formed glob`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.cfg.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case c.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error containing %q", c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("Validate() = %q, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	got := heartbeat.Config{}.WithDefaults()
	want := heartbeat.Config{Name: "default", Every: 30 * time.Minute, Checklist: "HEARTBEAT.md", DedupWindow: 24 * time.Hour, Overlap: "skip", OutputMode: "notify", Timeout: 5 * time.Minute}
	if got.Name != want.Name || got.Every != want.Every || got.Checklist != want.Checklist || got.DedupWindow != want.DedupWindow ||
		got.Overlap != want.Overlap || got.OutputMode != want.OutputMode || got.Timeout != want.Timeout || got.Enabled {
		t.Errorf("Config{}.WithDefaults() = %+v, want %+v", got, want)
	}
}

func TestIsOK(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reply string
		want  bool
	}{
		{"HEARTBEAT_OK", true},
		{"  HEARTBEAT_OK\n", true},
		{"HEARTBEAT_OK.", true},
		{"**HEARTBEAT_OK**", true},
		{"`HEARTBEAT_OK`", true},
		{"HEARTBEAT_OK: nothing to report", true},
		{"All clear. HEARTBEAT_OK", true},
		{"Checked everything.\n\nHEARTBEAT_OK", true},
		{"HEARTBEAT_OK HEARTBEAT_OK", true},
		{"The disk is full, HEARTBEAT_OK does not apply", false},
		{"Disk full. Not HEARTBEAT_OK yet, please look", false},
		{"HEARTBEAT_OKAY", false},
		{"NOT_HEARTBEAT_OK", false},
		{"heartbeat_ok", false},
		{"HEARTBEAT OK", false},
		{"", false},
		{"Disk /var is 93% full.", false},
	}
	for _, c := range cases {
		if got := heartbeat.IsOK(c.reply); got != c.want {
			t.Errorf("IsOK(%q) = %v, want %v", c.reply, got, c.want)
		}
	}
}
