package webhook_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/webhook"
)

func TestTasksValidate(t *testing.T) {
	t.Parallel()
	if err := (webhook.Tasks{"report": {Tools: []string{"sales__*"}}, "default": {}}).Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
	for _, tt := range []struct {
		tasks webhook.Tasks
		want  string
	}{
		{webhook.Tasks{"Daily Report": {}}, "tasks.Daily Report: a task name is 1-64 characters"},
		{webhook.Tasks{"report": {Tools: []string{"sales__*", ""}}}, "tasks.report.tools[1]: empty"},
		{webhook.Tasks{"report": {MaxSteps: -1}}, "tasks.report.max_steps: -1: must not be negative"},
		{webhook.Tasks{"report": {Timeout: -time.Second}}, "tasks.report.timeout: -1s: must not be negative"},
	} {
		if err := tt.tasks.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%v) = %v, want an error containing %q", tt.tasks, err, tt.want)
		}
	}
}

// A task's runs use tasks.<name>.tools; other names, and the other sources
// a credential may be granted, use runner.tools (no answer).
func TestTaskTools(t *testing.T) {
	t.Parallel()
	h, err := webhook.New(bustest.New(t), webhook.Config{}, webhook.WithTasks(webhook.Tasks{"report": {Tools: []string{"sales__*"}}}))
	if err != nil {
		t.Fatal(err)
	}
	settingsFor := h.Policy().SettingsFor
	for _, tt := range []struct {
		source, name string
		want         []string
	}{
		{"task", "report", []string{"sales__*"}},
		{"task", "default", nil},
		{"deploy", "report", nil},
	} {
		if got, err := settingsFor(t.Context(), tt.source, tt.name); err != nil || !slices.Equal(got.Tools, tt.want) {
			t.Errorf("SettingsFor(%s, %s) = %+v, %v; want tools %v", tt.source, tt.name, got, err, tt.want)
		}
	}
}

// A task's runs use its model, fallback, max_steps and timeout.
func TestTaskModel(t *testing.T) {
	t.Parallel()
	tc := webhook.TaskConfig{Model: "strong", Fallback: []string{"cheap"}, MaxSteps: 12, Timeout: 10 * time.Minute}
	h, err := webhook.New(bustest.New(t), webhook.Config{}, webhook.WithTasks(webhook.Tasks{"report": tc}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Policy().SettingsFor(t.Context(), "task", "report")
	if err != nil || got.Model != "strong" || !slices.Equal(got.Fallback, tc.Fallback) || got.MaxSteps != 12 || got.Timeout != 10*time.Minute {
		t.Errorf("SettingsFor(task, report) = %+v, %v; want %+v", got, err, tc)
	}
}
