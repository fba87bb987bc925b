package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"

	"github.com/agentwork/agentwork/bus"
)

// The console grant: a caller may use the web console when its Allows
// says yes to KindConsole with ConsoleRead (see everything, change
// nothing), and change state through it with ConsoleWrite.
const (
	KindConsole  = "console"
	ConsoleRead  = "read"
	ConsoleWrite = "write"
)

// Console is the capability of the web console (package console): the
// pages at "/" and below, every path outside /v1 and the probes. Handler
// is called once, by New, with the server itself: the console is a client
// of its API (Local) and logs people in with Authenticate. The handler
// authenticates its users itself.
type Console interface {
	Handler(s *Server) http.Handler
}

// Authenticate tells whom token belongs to: the admin token is the admin
// (a Caller named admin that is allowed everything); another is asked of
// Deps.Callers as a bearer token (a webhook credential). An unknown token
// is an error. The console logs people in with it.
func (s *Server) Authenticate(r *http.Request, token string) (Caller, error) {
	if token == "" {
		return Caller{}, errors.New("no token")
	}
	if want := s.admin.Load(); want != nil {
		sum := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
			return Caller{Name: AdminName, Admin: true, Allows: func(string, string) bool { return true }}, nil
		}
	}
	if s.deps.Callers == nil {
		return Caller{}, errors.New("the token is not the admin token")
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "/", http.NoBody)
	if err != nil {
		return Caller{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return s.deps.Callers(req, nil)
}

// CredentialLookup finds the webhook token credential called name as the
// config has it now: its Caller (the grant the API applies to it) and the
// SHA-256 of its token. ok is false when no token has that name.
type CredentialLookup func(name string) (c Caller, tokenSum [sha256.Size]byte, ok bool)

// AdminName is the name of the admin token's caller. No webhook
// credential may take it (webhook.ReservedNames).
const AdminName = "admin"

// Credential finds the credential called name as this server accepts it
// now: the admin token's caller (AdminName; not before Run has read a
// generated token) or a webhook token's (Deps.Credentials), with the
// SHA-256 of its token, so that a caller can tell whether a token it
// saw is still the one accepted. ok is false for a name no token has.
func (s *Server) Credential(name string) (c Caller, tokenSum [sha256.Size]byte, ok bool) {
	if name == AdminName {
		want := s.admin.Load()
		if want == nil {
			return Caller{}, tokenSum, false
		}
		return Caller{Name: AdminName, Admin: true, Allows: func(string, string) bool { return true }}, *want, true
	}
	if s.deps.Credentials == nil {
		return Caller{}, tokenSum, false
	}
	return s.deps.Credentials(name)
}

// Bus is the bus the server serves (Deps.Bus).
func (s *Server) Bus() *bus.Bus { return s.deps.Bus }

// Local serves the API in-process as the admin sees it: every /v1 route
// without the token check, and /healthz and /readyz. It is for a part of
// this process that has authenticated and authorized its caller itself
// (the console calls the API's own handlers with it, so it has no second
// way to change state); it must never be mounted on a listener.
func (s *Server) Local() http.Handler { return s.local }
