package nats

import (
	"errors"
	"fmt"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// Config is a nats connector's entry in agentwork.yaml:
//
//	connectors:
//	  alerts: {type: nats, subject: alerts.agentwork, jetstream: true}
type Config struct {
	// Subject is where notifications are published, e.g.
	// "alerts.agentwork". Required; no wildcards, and not under agentwork's
	// prefix (agentwork.>), $... or _INBOX... (see CheckOwn).
	Subject string `yaml:"subject,omitempty" json:"subject,omitempty"`
	// JetStream publishes with JetStream and waits for the ack of the
	// stream that captures Subject (which you create). Default false: core
	// NATS publish and flush.
	JetStream bool `yaml:"jetstream,omitempty" json:"jetstream,omitempty"`
}

// Validate checks c. Whether Subject is one of agentwork's own is checked
// by CheckBus, where the bus's prefix is known (config check, and when the
// connector is built).
func (c Config) Validate() error {
	if c.Subject == "" {
		return errors.New("subject: required for type nats (e.g. alerts.agentwork)")
	}
	if err := CheckSubject(c.Subject); err != nil {
		return fmt.Errorf("subject: %w", err)
	}
	return nil
}

// CheckDestination checks a target's destination: a subject to publish
// on instead of Subject (alerts:alerts.team-b).
func (c Config) CheckDestination(dest string) error {
	if err := CheckSubject(dest); err != nil {
		return fmt.Errorf("destination: want a NATS subject: %w", err)
	}
	return nil
}

// CheckBus checks Subject (dest "") or dest against the bus's subjects:
// none may be agentwork's own or the server's (CheckOwn).
func (c Config) CheckBus(sub bus.Subjects, dest string) error {
	if dest == "" {
		if err := CheckOwn(sub, c.Subject); err != nil {
			return fmt.Errorf("subject: %w", err)
		}
		return nil
	}
	return CheckOwn(sub, dest)
}

var _ connectors.BusChecker = Config{}

// Type is the nats connector type, for the connectors.Types of a build. It
// publishes on BuildDeps.Bus.
var Type = connectors.Define(connectors.Spec[Config]{
	Name: "nats",
	New: func(name string, c Config, deps connectors.BuildDeps) (connectors.Connector, error) {
		if deps.Bus == nil {
			return nil, errors.New("type nats needs the bus (BuildDeps.Bus is nil)")
		}
		if err := CheckOwn(deps.Bus.Subjects, c.Subject); err != nil {
			return nil, fmt.Errorf("subject: %w", err)
		}
		return New(deps.Bus, name, Options{Subject: c.Subject, JetStream: c.JetStream})
	},
})
