package config

import (
	"errors"

	"github.com/agentwork/agentwork/connectors"
)

func (f *File) validateMore() error {
	return errors.Join(f.Connectors.Validate(), f.Heartbeat.Validate(), f.Cron.Validate(), f.Webhook.Validate(), f.HTTP.Validate())
}

func (f *File) applyMoreDefaults() {
	if len(f.Connectors) == 0 {
		f.Connectors = connectors.Configs{"console": {Type: connectors.TypeConsole}}
	}
}
