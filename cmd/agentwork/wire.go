package main

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/agentwork/model/anthropic"
	"github.com/agentwork/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/config"
)

func newProvider(f *config.File, log *zap.Logger) (model.Provider, error) {
	switch f.Model.Provider {
	case "", "script":
		return script.New(f.Model.Script)
	case "openai":
		return openai.New(f.Model.Config, openai.WithLogger(log.Named("model")))
	case "anthropic":
		return anthropic.New(f.Model.Config, anthropic.WithLogger(log.Named("model")))
	default:
		return nil, fmt.Errorf("model.provider: %s is not available in this build", f.Model.Provider)
	}
}

// wire builds connectors and triggers from the config.
func wire(_ context.Context, _ *env, _ *config.File, _ *bus.Bus, _ *zap.Logger) (*wiring, error) {
	w := &wiring{policies: map[string]agentwork.Policy{
		bus.SourceTask: {Output: []agentwork.OutputGate{agentwork.ModeGate{Default: agentwork.DeliverReply}}},
	}}
	return w, nil
}
