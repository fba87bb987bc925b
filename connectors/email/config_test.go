package email_test

import (
	"testing"

	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/email"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := email.Config{Host: "smtp.example.com", From: from, To: []string{home}}
	with := func(f func(c *email.Config)) email.Config {
		c := ok
		c.To = append([]string(nil), ok.To...)
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		c    email.Config
		want string // "" for valid; else a part of the error
	}{
		{"minimal", ok, ""},
		{"login", with(func(c *email.Config) { c.Username, c.Password = user, password }), ""},
		{"implicit", with(func(c *email.Config) { c.TLS, c.Port = email.TLSImplicit, 465 }), ""},
		{"none to localhost with a login", with(func(c *email.Config) {
			c.Host, c.TLS, c.Username, c.Password = "localhost", email.TLSNone, user, password
		}), ""},
		{"none to a relay without a login", with(func(c *email.Config) { c.Host, c.TLS, c.Port = "relay.internal", email.TLSNone, 25 }), ""},
		{"IPv6 host", with(func(c *email.Config) { c.Host = "::1" }), ""},
		{"no host", with(func(c *email.Config) { c.Host = "" }), "host: required"},
		{"host with a port", with(func(c *email.Config) { c.Host = "smtp.example.com:587" }), "host: \"smtp.example.com:587\": want a host name or IP address alone"},
		{"host as URL", with(func(c *email.Config) { c.Host = "smtp://smtp.example.com" }), "host:"},
		{"port", with(func(c *email.Config) { c.Port = 70000 }), "port: 70000"},
		{"tls", with(func(c *email.Config) { c.TLS = "ssl" }), `tls: "ssl": want starttls, implicit or none`},
		{"none with a login to another host", with(func(c *email.Config) { c.TLS, c.Username, c.Password = email.TLSNone, user, password }), "tls: none would send the password unencrypted to smtp.example.com"},
		{"no from", with(func(c *email.Config) { c.From = "" }), "from: required"},
		{"bad from", with(func(c *email.Config) { c.From = "agentwork" }), `from: "agentwork" is not an email address`},
		{"no to", with(func(c *email.Config) { c.To = nil }), "to: required"},
		{"bad to", with(func(c *email.Config) { c.To = append(c.To, "a@b@c") }), "to[1]:"},
		{"non-ASCII address", with(func(c *email.Config) { c.To = []string{"zoë@example.com"} }), "to[0]: \"zoë@example.com\": the address must be ASCII"},
		{"username alone", with(func(c *email.Config) { c.Username = user }), "password: required with username"},
		{"password alone", with(func(c *email.Config) { c.Password = password }), "username: required with password"},
		{"subject with a newline", with(func(c *email.Config) { c.Subject = "a\nBcc: x@example.com" }), "subject: may not contain"},
		{"helo with a space", with(func(c *email.Config) { c.Helo = "a b" }), "helo:"},
	} {
		connectortest.CheckError(t, tc.name+": Validate()", tc.c.Validate(), tc.want, password)
	}
}

func TestCheckDestination(t *testing.T) {
	t.Parallel()
	c := email.Config{Host: "smtp.example.com", From: from, To: []string{home}}
	for dest, ok := range map[string]bool{"oncall@example.com": true, "oncall": false, "a@b,c@d": false, "zoë@example.com": false} {
		if err := c.CheckDestination(dest); (err == nil) != ok {
			t.Errorf("CheckDestination(%q) = %v, want ok %v", dest, err, ok)
		}
	}
}
