package main

import (
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/config"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/console"
	"github.com/agentwork/agentwork/connectors/discord"
	"github.com/agentwork/agentwork/connectors/email"
	"github.com/agentwork/agentwork/connectors/nats"
	"github.com/agentwork/agentwork/connectors/ntfy"
	"github.com/agentwork/agentwork/connectors/slack"
	"github.com/agentwork/agentwork/connectors/telegram"
	"github.com/agentwork/agentwork/connectors/webhook"
)

// connectorTypes are the connector types of this build, the values of
// type in the connectors section. A new type is its package and one line
// here.
func connectorTypes() connectors.Types {
	return connectors.Types{
		console.Type,
		nats.Type,
		telegram.Type,
		slack.Type,
		discord.Type,
		ntfy.Type,
		webhook.Type,
		email.Type,
	}
}

// wireConnectors builds the configured connectors and their dispatcher,
// which runs with the consumers (stopped after the triggers).
func wireConnectors(w *wiring, e *env, f *config.File, b *bus.Bus, log *zap.Logger) error {
	reg, err := connectorTypes().BuildAll(f.Connectors, connectors.BuildDeps{Stdout: e.stdout, Bus: b, Logger: log.Named("connectors")})
	if err != nil {
		return err
	}
	w.connectorNames = reg.Names()
	w.answerers = answerers(reg)
	if len(reg) > 0 {
		w.dispatcher = connectors.NewDispatcher(b, reg, f.Delivery, log.Named("connectors"))
		w.consumers = append(w.consumers, w.dispatcher.Run)
	}
	return nil
}
