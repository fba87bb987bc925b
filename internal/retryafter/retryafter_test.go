package retryafter_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/agentwork/agentwork/internal/retryafter"
)

// now is a quarter of a second into a second, so that rounding shows.
var now = time.Date(2026, 3, 14, 9, 30, 0, 250e6, time.UTC)

func TestHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"none", nil, 0, false},
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second, true},
		{"fraction", http.Header{"Retry-After": {" 1.5 "}}, 1500 * time.Millisecond, true},
		{"zero", http.Header{"Retry-After": {"0"}}, 0, true},
		{"ms wins", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"3"}}, 250 * time.Millisecond, true},
		{"bad ms falls back", http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"3"}}, 3 * time.Second, true},
		// now is 09:30:00.25; a date in whole seconds is waited for to its end.
		{"http date", http.Header{"Retry-After": {"Sat, 14 Mar 2026 09:31:30 GMT"}}, 90 * time.Second, true},
		{"past date", http.Header{"Retry-After": {"Mon, 01 Jan 2001 00:00:00 GMT"}}, 0, true},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0, false},
		{"negative", http.Header{"Retry-After": {"-5"}}, 0, true},
		{"NaN", http.Header{"Retry-After": {"NaN"}}, 0, true},
		{"huge", http.Header{"Retry-After": {"1e300"}}, retryafter.Max, true},
		{"infinite ms", http.Header{"Retry-After-Ms": {"+Inf"}}, retryafter.Max, true},
	}
	for _, tt := range tests {
		got, ok := retryafter.Header(tt.header, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: Header(%v) = %s, %v; want %s, %v", tt.name, tt.header, got, ok, tt.want, tt.ok)
		}
	}
}

func TestUntil(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		t    time.Time
		want time.Duration
	}{
		{"whole second rounds up", now.Truncate(time.Second).Add(40 * time.Second), 40 * time.Second},
		{"fraction kept", now.Add(1500 * time.Millisecond), 1500 * time.Millisecond},
		{"past", now.Add(-time.Hour), 0},
		{"far", now.Add(48 * time.Hour), retryafter.Max},
	}
	for _, tt := range tests {
		if got := retryafter.Until(tt.t, now); got != tt.want {
			t.Errorf("%s: Until(%s, %s) = %s, want %s", tt.name, tt.t, now, got, tt.want)
		}
	}
}

func TestSeconds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   float64
		want time.Duration
	}{
		{0, 0}, {-1, 0}, {math.NaN(), 0}, {math.Inf(1), retryafter.Max}, {0.25, 250 * time.Millisecond},
		{7, 7 * time.Second}, {1.0004, time.Second},
	} {
		if got := retryafter.Seconds(tt.in); got != tt.want {
			t.Errorf("Seconds(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzHeader: any header values give a wait between 0 and Max, never a
// panic.
func FuzzHeader(f *testing.F) {
	for _, seed := range [][2]string{
		{"", "3"}, {"250", ""}, {"", "1.5"}, {"", "Sat, 14 Mar 2026 09:31:30 GMT"}, {"", "Monday, 02-Jan-06 15:04:05 MST"},
		{"NaN", "-Inf"}, {"1e309", "1e300"}, {"-1", "-5"}, {"0x10", "soon"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, ms, after string) {
		h := http.Header{}
		h.Set("retry-after-ms", ms)
		h.Set("Retry-After", after)
		d, ok := retryafter.Header(h, now)
		if d < 0 || d > retryafter.Max || (!ok && d != 0) {
			t.Fatalf("Header(ms %q, Retry-After %q) = %s, %v; want 0..%s", ms, after, d, ok, retryafter.Max)
		}
	})
}
