package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
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
			return Caller{Name: "admin", Admin: true, Allows: func(string, string) bool { return true }}, nil
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

// Local serves the API in-process as the admin sees it: every /v1 route
// without the token check, and /healthz and /readyz. It is for a part of
// this process that has authenticated and authorized its caller itself
// (the console calls the API's own handlers with it, so it has no second
// way to change state); it must never be mounted on a listener.
func (s *Server) Local() http.Handler { return s.local }
