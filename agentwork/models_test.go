package agentwork_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model"
)

// namedModel answers as the model called id, or fails with err.
func namedModel(id string, err error) model.Provider {
	return model.ProviderFunc(func(context.Context, model.Request) (model.Reply, error) {
		if err != nil {
			return model.Reply{}, err
		}
		return model.Reply{Text: "answered by " + id, Model: id}, nil
	})
}

// A run uses its name's model, else its source's, else runner.model; the
// next of its fallback list takes over when that model is unavailable, and
// the done event names the model that answered. A model the runner does
// not have fails the run at once, naming the models there are.
func TestRunModelAndFallback(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	events := watchEvents(t, b)
	down := &model.Error{Class: model.ClassTransient, Status: 503, Message: "overloaded"}
	cfg := testConfig()
	cfg.Model = "cheap"
	cfg.MaxAttempts = 1
	models := map[string]model.Provider{
		"cheap":  namedModel("cheap-1", nil),
		"strong": namedModel("strong-1", nil),
		"down":   namedModel("", down),
	}
	stop := startRunner(t, b, namedModel("default-1", nil), cfg, map[string]agentwork.Policy{
		"task": {SettingsFor: func(_ context.Context, _, name string) (agentwork.Settings, error) {
			switch name {
			case "strong":
				return agentwork.Settings{Model: "strong"}, nil
			case "falls":
				return agentwork.Settings{Model: "down", Fallback: []string{"down", "strong"}}, nil
			case "default":
				return agentwork.Settings{Model: model.DefaultName}, nil
			case "nope":
				return agentwork.Settings{Model: "nope"}, nil
			case "alldown":
				return agentwork.Settings{Model: "down"}, nil
			}
			return agentwork.Settings{}, nil
		}},
		"heartbeat": {Model: "strong"},
	}, agentwork.WithModels(models))
	for _, req := range []agentwork.Request{
		{Source: "task", Name: "plain", Prompt: "x", Deliver: agentwork.DeliverReply},
		{Source: "task", Name: "strong", Prompt: "x", Deliver: agentwork.DeliverReply},
		{Source: "task", Name: "falls", Prompt: "x", Deliver: agentwork.DeliverReply},
		{Source: "task", Name: "default", Prompt: "x", Deliver: agentwork.DeliverReply},
		{Source: "task", Name: "nope", Prompt: "x", Deliver: agentwork.DeliverReply},
		{Source: "task", Name: "alldown", Prompt: "x", Deliver: agentwork.DeliverReply},
		{Source: "heartbeat", Name: "default", Prompt: "x", Deliver: agentwork.DeliverReply},
	} {
		publish(t, b, req)
	}
	evs := events.runEvents(7)
	stop()
	byName := map[string]agentwork.Result{}
	for _, e := range evs {
		byName[e.Run.Source+"/"+e.Run.Name] = e.Run
	}
	for name, want := range map[string]string{
		"task/plain":        "cheap-1",   // runner.model
		"task/strong":       "strong-1",  // the name's
		"task/falls":        "strong-1",  // down, then strong
		"task/default":      "default-1", // the model section
		"heartbeat/default": "strong-1",  // the source's
	} {
		if res := byName[name]; res.Outcome != bus.OutcomeDone || res.Model != want || res.Reply != "answered by "+want {
			t.Errorf("%s: %s %q by %q (%s), want done by %s", name, res.Outcome, res.Reply, res.Model, res.Error, want)
		}
	}
	if res := byName["task/nope"]; res.Outcome != bus.OutcomeError || res.Class != string(model.ClassPermanent) ||
		!strings.Contains(res.Error, `"nope": no such model (models: cheap, default, down, strong)`) {
		t.Errorf("task/nope = %s %s %q, want a permanent error naming the models", res.Outcome, res.Class, res.Error)
	}
	if res := byName["task/alldown"]; res.Outcome != bus.OutcomeError || !strings.Contains(res.Error, "overloaded") {
		t.Errorf("task/alldown = %s %q, want the model's error", res.Outcome, res.Error)
	}
}

func TestCheckModels(t *testing.T) {
	t.Parallel()
	models := []string{"cheap", "default"}
	if err := agentwork.CheckModels("cron.jobs[0].", "cheap", []string{"default"}, models); err != nil {
		t.Errorf("CheckModels(known) = %v", err)
	}
	err := agentwork.CheckModels("cron.jobs[2].", "x", []string{"cheap", "y"}, models)
	for _, want := range []string{`cron.jobs[2].model: "x": no such model (models: cheap, default)`, `cron.jobs[2].fallback[1]: "y": no such model`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckModels = %v, want %q", err, want)
		}
	}
}
