package model

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Class says what the runner should do about a failed model call.
type Class string

// The error classes. They appear in error events as "class".
const (
	// ClassTransient: retry later (429, 5xx, overloaded, connection reset).
	ClassTransient Class = "transient"
	// ClassTimeout: the call took too long; retry later.
	ClassTimeout Class = "timeout"
	// ClassPermanent: retrying will not help (400, 401, 403, 404, bad model,
	// broken replies); the run fails at once with a message saying what to fix.
	ClassPermanent Class = "permanent"
)

// Error is a classified model error.
type Error struct {
	Class Class
	// Status is the HTTP status, 0 if none.
	Status int
	// RetryAfter is the delay the server asked for, 0 if none.
	RetryAfter time.Duration
	// Message says what went wrong and, for permanent errors, what to fix.
	// It never contains API keys.
	Message string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("model: %s", e.Message)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Classify returns the class of err: the Class of an *Error in its chain,
// ClassTimeout for deadlines and network timeouts, ClassTransient otherwise.
func Classify(err error) Class {
	var me *Error
	if errors.As(err, &me) {
		return me.Class
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ClassTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ClassTimeout
	}
	return ClassTransient
}

// RetryAfter returns the server-requested delay in err's chain, or 0.
func RetryAfter(err error) time.Duration {
	var me *Error
	if errors.As(err, &me) {
		return me.RetryAfter
	}
	return 0
}

// Retryable reports whether a failed call may succeed if tried again.
func Retryable(err error) bool {
	c := Classify(err)
	return c == ClassTransient || c == ClassTimeout
}
