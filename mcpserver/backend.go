package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/api/problem"
)

// maxReply bounds an answer of the API that a tool reads.
const maxReply = 16 << 20

// backend is how the tools reach the HTTP API.
type backend interface {
	// do sends method path with body (JSON, if not nil) and headers for
	// caller, and returns the status and the body of the answer.
	do(ctx context.Context, c Caller, method, path string, header http.Header, body []byte) (int, []byte, error)
}

// inProcess calls the api server's handler in process.
type inProcess struct{ h http.Handler }

func (b inProcess) do(ctx context.Context, c Caller, method, path string, header http.Header, body []byte) (int, []byte, error) {
	ctx = api.WithActor(ctx, api.Actor{Via: "mcp", Name: c.Name, Credential: c.Credential})
	r, err := http.NewRequestWithContext(ctx, method, "http://agentwork.local"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	r.RemoteAddr = "127.0.0.1:0"
	for k, v := range header {
		r.Header[k] = v
	}
	if c.authorization != "" {
		// The public routes (a task, a workflow's start) authenticate the
		// caller's own credential and check its grant themselves.
		r.Header.Set("Authorization", c.authorization)
	}
	w := &recorder{header: http.Header{}}
	b.h.ServeHTTP(w, r)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.status, w.body.Bytes(), nil
}

// recorder is the response of an in-process call.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }
func (w *recorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len()+len(p) > maxReply {
		return 0, errors.New("mcpserver: answer too large")
	}
	return w.body.Write(p)
}
func (w *recorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *recorder) Flush() {}

// remote calls the HTTP API of a running server.
type remote struct {
	base  string
	token string
	hc    *http.Client
}

func (b remote) do(ctx context.Context, _ Caller, method, path string, header http.Header, body []byte) (int, []byte, error) {
	r, err := http.NewRequestWithContext(ctx, method, b.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range header {
		r.Header[k] = v
	}
	r.Header.Set("Authorization", "Bearer "+b.token)
	r.Header.Set(api.ViaHeader, "mcp")
	resp, err := b.hc.Do(r)
	if err != nil {
		return 0, nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("the HTTP API at %s does not answer (%v): is `agentwork serve` running there, with http.listen on? Set --api", b.base, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return 0, nil, &Error{Code: CodeUnavailable, Message: "reading the HTTP API's answer: " + err.Error() + "; try again"}
	}
	return resp.StatusCode, raw, nil
}

// call makes one API call for c: in (if not nil) is sent as JSON, a 2xx
// answer is decoded into out (if not nil), any other answer is an *Error.
func (s *Server) call(ctx context.Context, c Caller, method, path string, header http.Header, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return &Error{Code: CodeInternal, Message: err.Error()}
		}
		if header == nil {
			header = http.Header{}
		}
		if header.Get("Content-Type") == "" {
			header.Set("Content-Type", "application/json")
		}
	}
	status, raw, err := s.api.do(ctx, c, method, path, header, body)
	if err != nil {
		if _, ok := errors.AsType[*Error](err); ok {
			return err
		}
		return &Error{Code: CodeUnavailable, Message: err.Error()}
	}
	if status/100 != 2 {
		return problemError(status, raw)
	}
	if out == nil || status == http.StatusNoContent {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &Error{Code: CodeInternal, Message: fmt.Sprintf("the API's answer to %s %s is not what this version expects (%v): are agentwork mcp and agentwork serve the same version?", method, path, err)}
	}
	return nil
}

// problemError turns a problem details answer into a tool error.
func problemError(status int, raw []byte) *Error {
	var d problem.Details
	msg := ""
	if json.Unmarshal(raw, &d) == nil && d.Detail != "" {
		msg = d.Detail
		var fields []string
		for _, f := range d.Errors {
			if f.Field != "" && !strings.Contains(msg, f.Field+":") {
				fields = append(fields, f.Field+": "+f.Detail)
			}
		}
		if len(fields) > 0 {
			msg += " (" + strings.Join(fields, "; ") + ")"
		}
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Code: codeOf(status), Message: msg}
}

func codeOf(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return CodeInvalid
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict, http.StatusPreconditionFailed:
		return CodeConflict
	case http.StatusServiceUnavailable, http.StatusInsufficientStorage, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return CodeUnavailable
	}
	return CodeInternal
}
