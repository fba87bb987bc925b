// Package retryafter reads the wait a server asks for before a retry, for
// the model clients and the chat connectors alike: a Retry-After header
// (seconds, or an HTTP date), the retry-after-ms header OpenAI and
// Anthropic send, a time a bucket refills, or a number of seconds a body
// names (Telegram's and Discord's retry_after). Every wait is rounded to
// the millisecond, 0 when it is not positive, and at most Max.
package retryafter

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Max caps a wait a server asks for.
const Max = 24 * time.Hour

// Header returns the wait h asks for: retry-after-ms (milliseconds), else
// Retry-After (seconds, or an HTTP date: see Until). ok is false when
// neither holds a value it can read.
func Header(h http.Header, now time.Time) (d time.Duration, ok bool) {
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return Seconds(f / 1000), true
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return Seconds(f), true
		}
		if t, err := http.ParseTime(v); err == nil {
			return Until(t, now), true
		}
	}
	return 0, false
}

// Until returns the wait from now until t, as Seconds does. A time in
// whole seconds (an HTTP date, an RFC 3339 time without a fraction) may
// stand for any instant of that second, so the wait is rounded up to a
// whole number of seconds: a retry never comes before the time the server
// meant.
func Until(t, now time.Time) time.Duration {
	wait := t.Sub(now)
	if r := wait % time.Second; t.Nanosecond() == 0 && r > 0 {
		wait += time.Second - r
	}
	return Seconds(wait.Seconds())
}

// Seconds turns a wait in seconds into a duration rounded to the
// millisecond: 0 for NaN and waits that are not positive, at most Max.
func Seconds(s float64) time.Duration {
	switch {
	case math.IsNaN(s) || s <= 0:
		return 0
	case s >= Max.Seconds():
		return Max
	}
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}
