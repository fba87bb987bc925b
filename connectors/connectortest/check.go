package connectortest

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/connectors"
)

// The checks a connector's own tests share.

// Class is what an error of Send means for the dispatcher: Permanent, or
// a retry (Retry) after a wait.
type Class struct {
	permanent bool
	after     time.Duration
}

// Permanent is the class of a *connectors.PermanentError: never retried.
var Permanent = Class{permanent: true}

// Retry is the class of an error retried after after: a
// *connectors.RetryableError asking for it, or with after 0 any error
// that is not permanent and asks for no wait (the dispatcher's backoff).
func Retry(after time.Duration) Class { return Class{after: after} }

func (c Class) String() string {
	if c.permanent {
		return "permanent"
	}
	return "a retry after " + c.after.String()
}

// CheckClass fails t unless err, what a Send returned, is of class want.
func CheckClass(t *testing.T, what string, err error, want Class) {
	t.Helper()
	var re *connectors.RetryableError
	switch {
	case err == nil:
		t.Errorf("%s: Send = nil, want an error (%s)", what, want)
	case want.permanent:
		if !connectors.IsPermanent(err) || errors.As(err, &re) {
			t.Errorf("%s: Send = %v, want a permanent error", what, err)
		}
	case connectors.IsPermanent(err):
		t.Errorf("%s: Send = %v, a permanent error; want %s", what, err, want)
	case connectors.RetryAfter(err) != want.after:
		t.Errorf("%s: Send = %v, want %s", what, err, want)
	}
}

// CheckError fails t unless err, what a check such as Config.Validate
// returned, is as want says ("": nil, else an error containing want), and
// unless it quotes none of secrets.
func CheckError(t *testing.T, what string, err error, want string, secrets ...string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s = %v, want nil", what, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("%s = %v, want an error with %q", what, err, want)
	}
	for _, s := range secrets {
		if err != nil && s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("%s = %v, which quotes the secret %q", what, err, s)
		}
	}
}

// Decode decodes src, entries of agentwork.yaml's connectors section, as
// types do, and fails t unless they decode and validate.
func Decode(t *testing.T, types connectors.Types, src string) connectors.Configs {
	t.Helper()
	var node yaml.Node
	if err := yaml.Unmarshal([]byte(src), &node); err != nil {
		t.Fatalf("yaml.Unmarshal(%q) = %v", src, err)
	}
	cs, err := types.Decode(&node)
	if err != nil {
		t.Fatalf("Decode(%q) = %v", src, err)
	}
	if err := cs.Validate(); err != nil {
		t.Fatalf("Validate(%q) = %v", src, err)
	}
	return cs
}

// HTTPClient returns a client with a transport of its own, whose idle
// connections are closed when t ends (so that no keep-alive goroutine
// outlives the test).
func HTTPClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}
