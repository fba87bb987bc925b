package memory

import (
	"fmt"
	"time"
)

// Config is the memory section of agentwork.yaml.
//
//	memory:
//	  timezone: Europe/Berlin
//	  keep_days: 30
type Config struct {
	// Timezone is the IANA zone whose date names "today" (the daily log
	// runs append to) and the times of entries. Default UTC.
	Timezone string `yaml:"timezone" json:"timezone,omitempty"`
	// KeepDays is how long a daily log is kept: it expires this many days
	// after its day ends (from its last write; earlier revisions go
	// earlier). Long-term memory and the checklist never expire. Default
	// 30, at most 3650.
	KeepDays int `yaml:"keep_days" json:"keep_days,omitempty"`
}

// DefaultKeepDays is the default of Config.KeepDays.
const DefaultKeepDays = 30

// WithDefaults returns c with zero fields filled.
func (c Config) WithDefaults() Config {
	if c.Timezone == "" {
		c.Timezone = "UTC"
	}
	if c.KeepDays == 0 {
		c.KeepDays = DefaultKeepDays
	}
	return c
}

// Validate checks c; errors name the field as written in agentwork.yaml.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.Timezone == "Local" {
		return fmt.Errorf("memory.timezone: %q: name an IANA zone (e.g. Europe/Berlin), not the server's local zone", c.Timezone)
	}
	if _, err := time.LoadLocation(c.Timezone); err != nil {
		return fmt.Errorf("memory.timezone: %q is not an IANA time zone (e.g. America/New_York, Europe/Berlin, UTC)", c.Timezone)
	}
	if c.KeepDays < 1 || c.KeepDays > 3650 {
		return fmt.Errorf("memory.keep_days: %d: want 1-3650 (days a daily log is kept)", c.KeepDays)
	}
	return nil
}

// Levels of memory in a run's prompt (runner.memory, heartbeat.memory, a
// cron job's memory, tasks.<name>.memory).
const (
	// LevelNone: no memory in the prompt (the default).
	LevelNone = "none"
	// LevelLight: long-term memory.
	LevelLight = "light"
	// LevelFull: long-term memory, today's log and yesterday's.
	LevelFull = "full"
)

// CheckLevel checks a memory level as written at field ("" is the level
// above's).
func CheckLevel(field, level string) error {
	switch level {
	case "", LevelNone, LevelLight, LevelFull:
		return nil
	}
	return fmt.Errorf("%s: %q: want none, light (long-term memory) or full (long-term memory, today's and yesterday's log)", field, level)
}
