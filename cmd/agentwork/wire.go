package main

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/config"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/anthropic"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/triggers/cron"
	"github.com/agentwork/agentwork/triggers/heartbeat"
	"github.com/agentwork/agentwork/triggers/webhook"
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

// wire builds connectors, triggers and the HTTP API from the config. It does
// no I/O beyond what constructors do; everything starts in serve.
func wire(_ context.Context, e *env, f *config.File, b *bus.Bus, log *zap.Logger) (*wiring, error) {
	// Tasks take the runner's default output gates: the request's delivery
	// (auto by default) and dedup with runner.dedup_window.
	w := &wiring{policies: map[string]agentwork.Policy{bus.SourceTask: {}}}
	if err := wireConnectors(w, e, f, b, log); err != nil {
		return nil, err
	}

	hb, err := heartbeat.New(b, f.Heartbeat, heartbeat.WithLogger(log.Named("heartbeat")), heartbeat.WithBaseDir(f.Dir()))
	if err != nil {
		return nil, err
	}
	w.policies[bus.SourceHeartbeat] = hb.Policy()
	w.triggers = append(w.triggers, hb.Run, func(ctx context.Context) error { return b.Serve(ctx, hb.Service()) })

	sched, err := cron.New(b, f.Cron, cron.WithLogger(log.Named("cron")))
	if err != nil {
		return nil, err
	}
	w.policies[bus.SourceCron] = sched.Policy()
	w.triggers = append(w.triggers, sched.Run, func(ctx context.Context) error { return b.Serve(ctx, sched.Service()) })

	tasks, err := webhook.New(b, f.Webhook, webhook.WithLogger(log.Named("webhook")), webhook.WithConnectors(w.connectorNames...))
	if err != nil {
		return nil, err
	}
	// Sources a webhook credential may request besides "task" run like tasks.
	for _, src := range webhookSources(f.Webhook) {
		if _, ok := w.policies[src]; !ok {
			w.policies[src] = w.policies[bus.SourceTask]
		}
	}
	if !f.HTTP.Off() {
		ready := func(ctx context.Context) error {
			if err := b.Ready(ctx); err != nil {
				return err
			}
			if w.runner == nil {
				return agentwork.ErrNotConsuming
			}
			return w.runner.Ready()
		}
		srv := api.New(f.HTTP, api.Deps{Bus: b, Tasks: tasks, Routes: []api.Router{hb, sched}, DataDir: b.Config().DataDir, Ready: ready},
			api.WithLogger(log.Named("http")), api.WithVersion(version))
		w.triggers = append(w.triggers, srv.Run)
	}
	return w, nil
}

func webhookSources(c webhook.Config) []string {
	var out []string
	for _, t := range c.Tokens {
		out = append(out, t.Sources...)
	}
	for _, s := range c.Secrets {
		out = append(out, s.Sources...)
	}
	return out
}
