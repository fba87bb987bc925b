// Package secret keeps credentials out of what agentwork prints.
package secret

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// URL returns s, one URL or a comma-separated list of them, with the user
// information of each replaced by "***" and the query left out (it may hold
// a key): safe for errors and logs.
// It works on text that does not parse as a URL too (a config typo must
// not print the password next to it).
func URL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = one(p)
	}
	return strings.Join(parts, ",")
}

func one(s string) string {
	if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.Scheme != "" && u.Host != "" {
		hidden := u.User != nil
		u.User, u.RawQuery, u.ForceQuery = nil, "", false
		if hidden {
			return strings.Replace(u.String(), "://", "://***@", 1)
		}
		return u.String()
	}
	// Unparsable, or no user info found: cut everything between the
	// scheme and the last '@' before the path.
	rest, scheme := s, ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = s[:i+3], s[i+3:]
	}
	host, cut := rest, "?#"
	if scheme != "" {
		cut = "/?#"
	}
	if i := strings.IndexAny(rest, cut); i >= 0 {
		host = rest[:i]
	}
	if at := strings.LastIndex(host, "@"); at >= 0 {
		return scheme + "***@" + rest[at+1:]
	}
	return s
}

// Redact replaces every secret in s by [redacted], in every form a server
// or a formatter may have written it: as is, JSON- or Go-escaped (also
// with \/ and as \u escapes), URL-encoded, and base64. Redact whole text
// before cutting or quoting it: a part of a key matches nothing.
func Redact(s string, secrets []string) string {
	for _, k := range secrets {
		if k == "" {
			continue
		}
		for _, f := range forms(k) {
			s = strings.ReplaceAll(s, f, "[redacted]")
		}
	}
	return s
}

// forms returns the ways k may be written, longest first, so a form that
// contains another is replaced whole.
func forms(k string) []string {
	js, _ := json.Marshal(k)
	inner := string(js[1 : len(js)-1])
	var lower, upper strings.Builder
	for _, r := range k {
		fmt.Fprintf(&lower, `\u%04x`, r)
		fmt.Fprintf(&upper, `\u%04X`, r)
	}
	raw := []byte(k)
	out := []string{
		lower.String(), upper.String(),
		inner, strings.ReplaceAll(inner, "/", `\/`),
		strings.Trim(strconv.Quote(k), `"`),
		url.QueryEscape(k), url.PathEscape(k),
		base64.StdEncoding.EncodeToString(raw), base64.URLEncoding.EncodeToString(raw),
		base64.RawStdEncoding.EncodeToString(raw), base64.RawURLEncoding.EncodeToString(raw),
		k,
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	seen := map[string]bool{}
	return slices.DeleteFunc(out, func(f string) bool {
		dup := seen[f]
		seen[f] = true
		return dup
	})
}
