package config

import "errors"

func (f *File) validateMore() error {
	return errors.Join(f.Heartbeat.Validate(), f.Cron.Validate(), f.Webhook.Validate(), f.HTTP.Validate())
}

func (f *File) applyMoreDefaults() {}
