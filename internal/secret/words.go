package secret

import "strings"

// Min is the shortest value treated as a secret, in bytes: every part of
// agentwork that cuts configured values out of what it shows (the
// config's secrets, a tool's env and headers, a model's API key, a
// connector's tokens) cuts those of Min bytes or more, and a cut through
// a secret leaves fewer than Min bytes of it.
//
// Six: the shortest credentials met in practice are six or seven bytes
// (a password such as "hunter2", an ntfy topic, which is its own
// password), and below six a value is an ordinary word ("true", "info",
// "Basic") that would be cut out of every text. Real API keys and tokens
// are far longer, so six costs them nothing; a value of five bytes or
// fewer is not a secret worth cutting and is not cut.
const Min = 6

// schemes are the HTTP authentication schemes (and the "token"/"Bot"
// spellings some APIs use) a header value may start with: the word after
// them is the credential alone.
var schemes = []string{"basic", "bearer", "bot", "digest", "key", "negotiate", "ntlm", "oauth", "token", "apikey", "ssws"}

// Words splits a configured secret value into the parts to cut out of
// text: the value (spaces trimmed), and, when it is "<auth scheme>
// <credentials>" ("Bearer ghp_..."), the credentials alone, which a
// server may quote without the scheme. Parts shorter than Min are left
// out. The other words of a value with spaces (a passphrase) are not
// secrets on their own.
func Words(value string) []string {
	var out []string
	v := strings.TrimSpace(value)
	if len(v) >= Min {
		out = append(out, v)
	}
	if f := strings.Fields(v); len(f) == 2 && len(f[1]) >= Min && isScheme(f[0]) {
		out = append(out, f[1])
	}
	return out
}

func isScheme(w string) bool {
	for _, s := range schemes {
		if strings.EqualFold(w, s) {
			return true
		}
	}
	return false
}
