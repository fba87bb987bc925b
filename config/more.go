package config

// Sections of triggers, connectors and the HTTP API are added here as those
// packages land.

func (f *File) validateMore() error { return nil }

func (f *File) applyMoreDefaults() {}
