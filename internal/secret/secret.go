// Package secret keeps credentials out of what agentwork prints.
package secret

import (
	"net/url"
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
