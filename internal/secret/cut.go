package secret

import (
	"context"
	"slices"
	"strings"
	"unicode/utf8"
)

// Cut returns s with secrets cut out (Redact) and then cut to at most max
// bytes (max < 0: no limit) at a character boundary, and the length of s
// redacted: kept is shorter than whole when Cut cut. more says s is only
// the start of a longer text (a reader stopped at a cap): its end is a
// cut too.
//
// Where it cuts, it also drops a trailing incomplete character and the
// first bytes of a secret, in any form Redact knows, that end the kept
// text, if there are Min or more of them: no part of a secret of Min
// bytes survives the cut. A reader with a cap should read Margin(secrets)
// bytes past it before calling Cut, so a secret across the cap is seen
// whole and replaced, not dropped.
func Cut(s string, max int, more bool, secrets []string) (kept string, whole int) {
	s = Redact(s, secrets)
	whole, cut := len(s), more
	if max >= 0 && len(s) > max {
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s, cut = s[:n], true
	}
	if cut {
		s = trimEnd(s, secrets)
	}
	return s, whole
}

// trimEnd drops from the end of s, a text cut short, an incomplete
// character and every first part (Min bytes or more) of a form of a
// secret.
func trimEnd(s string, secrets []string) string {
	var all []string
	for _, k := range secrets {
		if len(k) >= Min {
			all = append(all, forms(k)...)
		}
	}
	for {
		if i := lastStart(s); i >= 0 && !utf8.FullRuneInString(s[i:]) {
			s = s[:i]
		}
		k := partial(s, all)
		if k == 0 {
			return s
		}
		s = s[:len(s)-k]
	}
}

// partial is the length of the longest first part of one of forms, of
// Min bytes or more but not the whole form, that ends s; 0 if none does.
func partial(s string, forms []string) int {
	best := 0
	for _, f := range forms {
		for k := min(len(f)-1, len(s)); k >= Min && k > best; k-- {
			if s[len(s)-k] == f[0] && strings.HasSuffix(s, f[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

// lastStart is the index of the start of the last (maybe partial)
// character of s, -1 for "".
func lastStart(s string) int {
	i := len(s) - 1
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// Margin is the length of the longest form (see Redact) of any of
// secrets: how far past its cap a reader reads so that a secret across
// the cap is seen whole.
func Margin(secrets []string) int {
	n := 0
	for _, k := range secrets {
		if k == "" {
			continue
		}
		for _, f := range forms(k) {
			n = max(n, len(f))
		}
	}
	return n
}

type ctxKey struct{}

// NewContext returns ctx carrying secrets besides those ctx carries: a
// tool loop hands its tools the config's secrets so that each tool that
// cuts its output (Cut) leaves no part of them at the cut.
func NewContext(ctx context.Context, secrets ...string) context.Context {
	if len(secrets) == 0 {
		return ctx
	}
	return context.WithValue(ctx, ctxKey{}, append(slices.Clip(FromContext(ctx)), secrets...))
}

// FromContext returns the secrets ctx carries (NewContext), nil if none.
func FromContext(ctx context.Context) []string {
	s, _ := ctx.Value(ctxKey{}).([]string)
	return s
}
