package agentwork_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
)

// levelMemory is a Memory whose section names the level asked for.
type levelMemory struct{}

func (levelMemory) Prompt(_ context.Context, level string) (string, error) {
	return "<memory>level " + level + "</memory>", nil
}

// brokenMemory cannot be read.
type brokenMemory struct{}

func (brokenMemory) Prompt(context.Context, string) (string, error) {
	return "", errors.New("bus: no responders")
}

// systemModel records the system prompt of each request name.
type systemModel struct {
	mu     sync.Mutex
	system map[string]string
}

func (m *systemModel) Complete(_ context.Context, req model.Request) (model.Reply, error) {
	m.mu.Lock()
	m.system[req.Meta["name"]] = req.System
	m.mu.Unlock()
	return model.Reply{Text: "ok"}, nil
}

// The memory setting of a run: its name's (SettingsFor), else its
// source's policy's, else runner.memory; none puts no memory in the
// prompt; memory that cannot be read is said, not left out.
func TestRunMemoryLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mem    agentwork.Memory
		runner string
		policy string
		own    string
		want   string // in the system prompt; "" : no memory section
	}{
		{name: "runner", mem: levelMemory{}, runner: "light", want: "level light"},
		{name: "source", mem: levelMemory{}, runner: "light", policy: "full", want: "level full"},
		{name: "own", mem: levelMemory{}, runner: "full", policy: "full", own: "none"},
		{name: "default", mem: levelMemory{}},
		{name: "broken", mem: brokenMemory{}, runner: "full", want: "could not be read for this run: bus: no responders"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			m := &systemModel{system: map[string]string{}}
			cfg := testConfig()
			cfg.Memory = tc.runner
			pol := agentwork.Policy{System: "Be brief.", Memory: tc.policy,
				SettingsFor: func(context.Context, string, string) (agentwork.Settings, error) {
					return agentwork.Settings{Memory: tc.own}, nil
				}}
			sink := watchEvents(t, b)
			startRunner(t, b, m, cfg, map[string]agentwork.Policy{bus.SourceTask: pol}, agentwork.WithMemory(tc.mem), agentwork.WithConnectors("c"))
			publish(t, b, agentwork.Request{Source: bus.SourceTask, Name: tc.name, Prompt: "hi", Deliver: agentwork.DeliverNone})
			sink.runEvents(1)
			m.mu.Lock()
			sys := m.system[tc.name]
			m.mu.Unlock()
			switch {
			case !strings.HasPrefix(sys, "Be brief."):
				t.Errorf("system = %q, want the policy's prompt first", sys)
			case tc.want == "" && strings.Contains(sys, "<memory>"):
				t.Errorf("system = %q, want no memory", sys)
			case tc.want != "" && (!strings.Contains(sys, "\n\n<memory") || !strings.Contains(sys, tc.want)):
				t.Errorf("system = %q, want a memory section with %q", sys, tc.want)
			}
		})
	}
}
