package console

import (
	"errors"
	"fmt"
	"time"
)

// Defaults and bounds of the console section.
const (
	// DefaultIdle is how long a session lasts without a request.
	DefaultIdle = 12 * time.Hour
	// DefaultMaxAge is how long a session lasts at most.
	DefaultMaxAge = 7 * 24 * time.Hour
	// MinSession is the shortest session_idle and session_max.
	MinSession = time.Minute
	// MaxSession is the longest session_max.
	MaxSession = 90 * 24 * time.Hour
)

// Config is the `console` section: how long the web console's sessions
// last.
//
//	console:
//	  session_idle: 12h   # without a request
//	  session_max: 168h   # in any case (7 days)
type Config struct {
	// SessionIdle is how long a session lasts without a request. Default
	// 12h; at least 1m, at most session_max.
	SessionIdle time.Duration `yaml:"session_idle" json:"session_idle,omitempty"`
	// SessionMax is how long a session lasts at most, however busy: then
	// its user logs in again. Default 168h (7 days); 1m to 2160h (90
	// days).
	SessionMax time.Duration `yaml:"session_max" json:"session_max,omitempty"`
}

// WithDefaults returns c with zero fields filled.
func (c Config) WithDefaults() Config {
	if c.SessionIdle == 0 {
		c.SessionIdle = DefaultIdle
	}
	if c.SessionMax == 0 {
		c.SessionMax = DefaultMaxAge
	}
	return c
}

// Validate checks c (zero fields are valid: they take the defaults).
func (c Config) Validate() error {
	var errs []error
	if c.SessionIdle != 0 && c.SessionIdle < MinSession {
		errs = append(errs, fmt.Errorf("console.session_idle: %s is too short; want at least %s (e.g. 12h)", c.SessionIdle, MinSession))
	}
	if c.SessionMax != 0 && (c.SessionMax < MinSession || c.SessionMax > MaxSession) {
		errs = append(errs, fmt.Errorf("console.session_max: %s: want %s to %s (90 days; e.g. 168h for 7 days: durations are in hours, not days)", c.SessionMax, MinSession, MaxSession))
	}
	if d := c.WithDefaults(); len(errs) == 0 && d.SessionIdle > d.SessionMax {
		errs = append(errs, fmt.Errorf("console.session_idle: %s is longer than console.session_max (%s): a session could never be idle that long; shorten session_idle or lengthen session_max", d.SessionIdle, d.SessionMax))
	}
	return errors.Join(errs...)
}
