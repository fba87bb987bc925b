package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/zap"
)

// DefaultServiceTimeout bounds the work of one request to a Service, and a
// Call whose context has no deadline (plus a margin for the round trip).
const DefaultServiceTimeout = 30 * time.Second

// ErrNoService means nothing answers on a service's subject: no running
// instance serves it.
var ErrNoService = errors.New("bus: no service answers")

// ErrNoReply, returned by an Endpoint's Handle, sends no reply: the request
// is for another instance (one that serves another heartbeat, say), which
// answers it.
var ErrNoReply = errors.New("bus: no reply")

// Service is a request-reply admin API on NATS, one subject per verb:
// <prefix>.api.<Name>.<verb>. It is served as a NATS micro service named
// agentwork-<Name>, so `nats micro ls|info|stats` find it, and every
// instance serves it in one queue group: one of them answers each request.
// Requests and replies are JSON; an error comes back in the
// Nats-Service-Error and Nats-Service-Error-Code headers (the code is an
// HTTP status) with a ServiceError as the body.
type Service struct {
	// Name is the service's subject token, e.g. "cron".
	Name string
	// Description is what `nats micro info` shows.
	Description string
	// QueueGroup is the group of instances that share the requests.
	// Default agentwork-<Name>.
	QueueGroup string
	// Timeout bounds the work of one request. Default DefaultServiceTimeout.
	Timeout time.Duration
	// Endpoints are the verbs.
	Endpoints []Endpoint
}

// Endpoint is one verb of a Service.
type Endpoint struct {
	// Verb is the last token of the subject, e.g. "list".
	Verb string
	// Handle answers one request; body is the request's payload (JSON, or
	// empty). Its result is sent as JSON; a json.RawMessage that is not
	// empty as it is (the handler encoded it, and answers for it being
	// JSON). An error is sent as a
	// ServiceError: the one in err's chain, else a 500 with err's text;
	// ErrNoReply sends nothing. ctx ends after the service's Timeout, or
	// when the service stops. Requests to one endpoint are handled one at a
	// time.
	Handle func(ctx context.Context, body []byte) (any, error)
}

// ServiceError is an error reply of a Service. Compare with errors.Is
// against a sentinel of the same Code.
type ServiceError struct {
	// Status is an HTTP status code: 400 for a bad request, 404, 409, 503
	// (retry later), 500.
	Status int `json:"status"`
	// Code is a machine-readable name, e.g. "not_found".
	Code string `json:"code,omitempty"`
	// Detail says what is wrong and what to do.
	Detail string `json:"detail"`
}

func (e *ServiceError) Error() string {
	if e.Detail != "" {
		return e.Detail
	}
	if e.Code != "" {
		return e.Code
	}
	return http.StatusText(e.Status)
}

// Is matches a ServiceError of the same Code.
func (e *ServiceError) Is(target error) bool {
	t, ok := target.(*ServiceError)
	return ok && t.Code != "" && t.Code == e.Code
}

// AsServiceError returns the ServiceError in err's chain, or a 500
// "internal" one with err's text.
func AsServiceError(err error) *ServiceError {
	if se, ok := errors.AsType[*ServiceError](err); ok {
		return se
	}
	return &ServiceError{Status: http.StatusInternalServerError, Code: "internal", Detail: err.Error()}
}

// StartService registers s as a NATS micro service and returns once the
// server knows every endpoint. stop unregisters it and returns once the
// server knows; the contexts of requests in flight end. stop is idempotent.
func (b *Bus) StartService(s Service) (stop func() error, err error) {
	if err := CheckToken("bus: service name", s.Name); err != nil {
		return nil, err
	}
	if s.QueueGroup == "" {
		s.QueueGroup = "agentwork-" + s.Name
	}
	if s.Timeout <= 0 {
		s.Timeout = DefaultServiceTimeout
	}
	svc, err := micro.AddService(b.nc, micro.Config{
		Name: "agentwork-" + s.Name, Version: "1.0.0", Description: s.Description, QueueGroup: s.QueueGroup,
	})
	if err != nil {
		return nil, fmt.Errorf("bus: service %s: %w", s.Name, err)
	}
	base, cancel := context.WithCancel(context.Background())
	stop = sync.OnceValue(func() error {
		defer cancel()
		if err := svc.Stop(); err != nil {
			return fmt.Errorf("bus: stop service %s: %w", s.Name, err)
		}
		if err := b.nc.FlushTimeout(s.Timeout); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			return fmt.Errorf("bus: stop service %s: %w", s.Name, err)
		}
		return nil
	})
	log := b.log.With(zap.String("service", s.Name))
	for _, ep := range s.Endpoints {
		err := CheckToken("bus: service "+s.Name+" verb", ep.Verb)
		if err == nil {
			err = svc.AddEndpoint(ep.Verb, endpointHandler(base, s.Timeout, ep, b.nc.MaxPayload, log), micro.WithEndpointSubject(b.Subjects.Service(s.Name, ep.Verb)))
		}
		if err != nil {
			_ = stop()
			return nil, fmt.Errorf("bus: service %s endpoint %s: %w", s.Name, ep.Verb, err)
		}
	}
	if err := b.nc.FlushTimeout(s.Timeout); err != nil {
		_ = stop()
		return nil, fmt.Errorf("bus: service %s: %w", s.Name, err)
	}
	return stop, nil
}

// Serve answers s's requests until ctx is done, then unregisters it and
// returns nil; an error only when it cannot be registered.
func (b *Bus) Serve(ctx context.Context, s Service) error {
	stop, err := b.StartService(s)
	if err != nil {
		return err
	}
	<-ctx.Done()
	return stop()
}

// endpointHandler answers ep's requests; maxPayload is the largest
// message the NATS server takes.
func endpointHandler(base context.Context, timeout time.Duration, ep Endpoint, maxPayload func() int64, log *zap.Logger) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		ctx, cancel := context.WithTimeout(base, timeout)
		defer cancel()
		out, err := ep.Handle(ctx, req.Data())
		if errors.Is(err, ErrNoReply) {
			return
		}
		if err != nil {
			se := AsServiceError(err)
			if se.Status >= 500 {
				log.Warn("service request failed", zap.String("verb", ep.Verb), zap.Error(err))
			}
			body, _ := json.Marshal(se)
			// A header value is one line; the body has the whole detail.
			desc := strings.NewReplacer("\r", " ", "\n", " ").Replace(se.Error())
			err = req.Error(strconv.Itoa(se.Status), desc, body)
		} else {
			err = respond(req, out, maxPayload(), ep.Verb, log)
		}
		if err != nil {
			log.Debug("service reply not sent", zap.String("verb", ep.Verb), zap.Error(err))
		}
	})
}

// respond sends out as the reply to req: as JSON (a json.RawMessage that
// is not empty as it is: its handler encoded it). A reply larger than the
// NATS server takes (limit) is answered with an error at once, instead of
// the caller waiting out its timeout for a reply that cannot be sent.
func respond(req micro.Request, out any, limit int64, verb string, log *zap.Logger) error {
	data, ok := out.(json.RawMessage)
	if !ok || len(data) == 0 {
		var err error
		if data, err = json.Marshal(out); err != nil {
			return err
		}
	}
	if limit > 0 && int64(len(data)) > limit {
		log.Warn("service reply larger than the NATS server takes; answered with an error", zap.String("verb", verb), zap.Int("bytes", len(data)), zap.Int64("max_payload", limit))
		se := &ServiceError{Status: 500, Code: "reply_too_large",
			Detail: fmt.Sprintf("the reply (%d bytes) is larger than the NATS server's max_payload (%d): ask for fewer (a smaller limit), or raise max_payload", len(data), limit)}
		body, _ := json.Marshal(se)
		return req.Error(strconv.Itoa(se.Status), se.Detail, body)
	}
	return req.Respond(data)
}

// Call sends in as JSON to verb of the service and decodes the reply into
// out (nil: the reply is not read). An error reply is a *ServiceError;
// nothing serving the service is ErrNoService. Without a deadline on ctx,
// the call waits DefaultServiceTimeout and a margin.
func (b *Bus) Call(ctx context.Context, service, verb string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("bus: %s %s: %w", service, verb, err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultServiceTimeout+5*time.Second)
		defer cancel()
	}
	subject := b.Subjects.Service(service, verb)
	m, err := b.nc.RequestWithContext(ctx, subject, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w on %s", ErrNoService, subject)
	case err != nil:
		return fmt.Errorf("bus: %s: %w", subject, err)
	}
	if code, desc := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader); code != "" || desc != "" {
		se := &ServiceError{}
		if json.Unmarshal(m.Data, se) != nil || se.Status == 0 {
			status, _ := strconv.Atoi(code)
			se = &ServiceError{Status: status, Detail: desc}
		}
		return se
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		return fmt.Errorf("bus: %s: unreadable reply: %w", subject, err)
	}
	return nil
}
