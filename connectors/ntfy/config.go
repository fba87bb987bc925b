package ntfy

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/httpapi"
)

// Defaults.
const (
	// DefaultBaseURL is the public ntfy server.
	DefaultBaseURL = "https://ntfy.sh"
	// DefaultTitle is the title of a notification: {source} and {name} are
	// the notification's source and name.
	DefaultTitle = "agentwork: {source}/{name}"
)

// Config is an ntfy connector's entry in agentwork.yaml:
//
//	connectors:
//	  phone:
//	    type: ntfy
//	    topic: ${NTFY_TOPIC}
//	    token: ${NTFY_TOKEN}   # or username + password; neither for an open topic
type Config struct {
	// BaseURL is the ntfy server. Default https://ntfy.sh; a self-hosted
	// server's URL (with a path prefix if it has one).
	BaseURL string `yaml:"base_url,omitempty" json:"base_url,omitempty" jsonschema:"default=https://ntfy.sh"`
	// Topic is the topic published to: 1-64 characters of A-Z, a-z, 0-9, _
	// and -. Required. On a public server anyone who knows the topic can
	// read it, so pick one nobody can guess (it is kept out of errors). A
	// target may name another topic (phone:alerts-team-b).
	Topic string `yaml:"topic,omitempty" json:"topic,omitempty"`
	// Token is an ntfy access token (tk_...), sent as Authorization: Bearer.
	// Secret: write ${NTFY_TOKEN}.
	Token string `yaml:"token,omitempty" json:"token,omitempty"`
	// Username and Password authenticate with Basic auth instead of a token.
	// Password is secret: write ${NTFY_PASSWORD}.
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
	Password string `yaml:"password,omitempty" json:"password,omitempty"`
	// Title of each notification; {source} and {name} are replaced by the
	// notification's source and name. Default "agentwork: {source}/{name}".
	Title string `yaml:"title,omitempty" json:"title,omitempty" jsonschema:"default=agentwork: {source}/{name}"`
	// Tags are ntfy tags added to every notification (an emoji short code
	// such as "robot" shows as that emoji). An important notification gets
	// "warning" too.
	Tags []string `yaml:"tags,omitempty" json:"tags,omitempty"`
}

// topicPattern is ntfy's topic syntax (server/server.go, topicRegex).
var topicPattern = regexp.MustCompile(`^[-_A-Za-z0-9]{1,64}$`)

// disallowedTopics are the paths of the ntfy server itself
// (server/config.go, DefaultDisallowedTopics), which reject a publish.
var disallowedTopics = []string{"docs", "static", "file", "app", "metrics", "account", "settings", "signup", "login", "v1"}

// CheckTopic reports whether topic can be published to. The error does not
// quote the topic, which is as good as a password on a public server.
func CheckTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("empty")
	case !topicPattern.MatchString(topic):
		return errors.New("want 1-64 characters of A-Z, a-z, 0-9, _ and -")
	case slices.Contains(disallowedTopics, topic):
		return fmt.Errorf("%q is a path of the ntfy server itself (%s are); pick another", topic, strings.Join(disallowedTopics, ", "))
	}
	return nil
}

// Validate checks c without I/O. Its errors never quote the token, the
// password or the topic.
func (c Config) Validate() error {
	var errs []error
	if err := httpapi.CheckBaseURL(c.BaseURL, DefaultBaseURL, "token, or username and password"); err != nil {
		errs = append(errs, fmt.Errorf("base_url: %w", err))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("topic: required (a topic nobody can guess, e.g. agentwork-$(openssl rand -hex 8); write ${NTFY_TOPIC})"))
	} else if err := CheckTopic(c.Topic); err != nil {
		errs = append(errs, fmt.Errorf("topic: %w", err))
	}
	switch {
	case c.Token != "" && (c.Username != "" || c.Password != ""):
		errs = append(errs, errors.New("token: set either token or username and password, not both"))
	case c.Token != "" && !strings.HasPrefix(c.Token, "tk_"):
		errs = append(errs, errors.New("token: want an ntfy access token (tk_..., made with `ntfy token add` or in the web app's account page); for a user's password set username and password"))
	case c.Token != "" && strings.ContainsFunc(c.Token, unicode.IsSpace):
		errs = append(errs, errors.New("token: contains white space"))
	case c.Username != "" && c.Password == "":
		errs = append(errs, errors.New("password: required with username (write ${NTFY_PASSWORD}; is the variable set?)"))
	case c.Password != "" && c.Username == "":
		errs = append(errs, errors.New("username: required with password"))
	case strings.Contains(c.Username, ":"):
		errs = append(errs, errors.New("username: may not contain ':' (Basic auth separates it from the password with one)"))
	}
	if strings.ContainsFunc(c.Title, unicode.IsControl) {
		errs = append(errs, errors.New("title: may not contain control characters or line breaks"))
	}
	for i, t := range c.Tags {
		if strings.TrimSpace(t) == "" || strings.Contains(t, ",") || strings.ContainsFunc(t, unicode.IsControl) {
			errs = append(errs, fmt.Errorf("tags[%d]: %q: want a non-empty tag without commas or control characters, e.g. robot", i, t))
		}
	}
	return errors.Join(errs...)
}

// CheckDestination checks a target's destination: a topic to publish to
// instead of Topic (phone:alerts-team-b).
func (c Config) CheckDestination(dest string) error {
	if err := CheckTopic(dest); err != nil {
		return fmt.Errorf("destination: want an ntfy topic: %w", err)
	}
	return nil
}

// Type is the ntfy connector type, for the connectors.Types of a build.
var Type = connectors.Define(connectors.Spec[Config]{
	Name:     "ntfy",
	Defaults: Config{BaseURL: DefaultBaseURL, Title: DefaultTitle},
	New: func(_ string, c Config, _ connectors.BuildDeps) (connectors.Connector, error) {
		return New(Options{
			BaseURL: c.BaseURL, Topic: c.Topic, Token: c.Token,
			Username: c.Username, Password: c.Password, Title: c.Title, Tags: c.Tags,
		})
	},
})
