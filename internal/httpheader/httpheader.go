// Package httpheader checks the header names and values a user writes in
// agentwork.yaml (model headers, MCP server headers, http_fetch and
// webhook connector headers) before they reach net/http, which would
// refuse them only at the first request.
package httpheader

import "strings"

// ValidName reports whether k is an HTTP field name: one or more token
// characters (RFC 9110 section 5.6.2).
func ValidName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ValidValue reports whether v can be a field value: no control
// characters (a line break would start another header) but tab.
func ValidValue(v string) bool {
	for _, r := range v {
		if (r < ' ' && r != '\t') || r == 0x7f {
			return false
		}
	}
	return true
}
