package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentwork/agentwork/internal/httpheader"
	"github.com/agentwork/agentwork/internal/netguard"
	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
)

// Defaults and limits of FetchConfig.
const (
	// DefaultFetchTimeout bounds one http_fetch call.
	DefaultFetchTimeout = 30 * time.Second
	// MaxFetchTimeout bounds timeout.
	MaxFetchTimeout = 10 * time.Minute
	// DefaultMaxBytes is how much of a response body http_fetch reads.
	DefaultMaxBytes = 64 << 10
	// MinMaxBytes and MaxMaxBytes bound max_bytes.
	MinMaxBytes = 1 << 10
	MaxMaxBytes = 1 << 20
	// DefaultMaxRedirects is how many redirects one call follows.
	DefaultMaxRedirects = 5
	// MaxMaxRedirects bounds max_redirects.
	MaxMaxRedirects = 20
)

// FetchConfig is tools.http_fetch: which URLs http_fetch may fetch, with
// which methods and headers, and the limits of a call.
//
//	http_fetch:
//	  allow:
//	    - prefix: https://api.github.com/repos/acme/
//	      methods: [GET, HEAD, POST]
//	      headers:
//	        Authorization: Bearer ${GITHUB_TOKEN}
//	    - prefix: http://127.0.0.1:9100/metrics
//	      allow_loopback: true
//	  timeout: 30s
//	  max_bytes: 65536
//	  max_redirects: 5
type FetchConfig struct {
	// Allow are the URL prefixes http_fetch may fetch, each with what it
	// may do there. A URL under none of them, first or after a redirect,
	// is refused. Required: at least one.
	Allow []FetchRule `yaml:"allow" json:"allow"`
	// Timeout bounds one call: connecting, every redirect, and reading
	// the body. Default 30s, at most 10m.
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty" jsonschema:"default=30s"`
	// MaxBytes is how many bytes of a response body http_fetch reads and
	// the model gets; a longer body is cut, and the model is told it was.
	// Default 65536 (64 KiB), 1024 to 1048576.
	MaxBytes int `yaml:"max_bytes,omitempty" json:"max_bytes,omitempty" jsonschema:"default=65536"`
	// MaxRedirects is how many redirects one call follows, each to a URL
	// the allow-list allows. 0 follows none (a redirect is an error).
	// Default 5, at most 20.
	MaxRedirects *int `yaml:"max_redirects,omitempty" json:"max_redirects,omitempty" jsonschema:"default=5"`
}

// FetchRule is one URL prefix http_fetch may fetch from.
type FetchRule struct {
	// Prefix is an http(s) URL without query or fragment. A URL is under
	// it when it has the same scheme, host and port, and its path is the
	// prefix's path or below it: https://api.example.com/v1/ allows
	// /v1/users, not /v2; https://example.com/status allows /status and
	// /status/disk, not /statusx. The model is shown the prefixes: put
	// credentials in headers, not here. Required.
	Prefix string `yaml:"prefix" json:"prefix"`
	// Methods are the methods allowed under Prefix: GET, HEAD and POST.
	// Default [GET, HEAD].
	Methods []string `yaml:"methods,omitempty" json:"methods,omitempty"`
	// Headers are sent with every request under Prefix (and only there:
	// a redirect elsewhere gets the headers of where it goes). Values are
	// secret: write ${VAR}; they are cut out of what the model gets.
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
	// AllowLoopback lets requests under Prefix connect to loopback
	// addresses (127.0.0.0/8, ::1, localhost). Default false.
	AllowLoopback bool `yaml:"allow_loopback,omitempty" json:"allow_loopback,omitempty"`
	// AllowPrivate lets requests under Prefix connect to private (RFC
	// 1918, fc00::/7, 100.64.0.0/10) and link-local addresses, the cloud
	// metadata services (169.254.169.254, metadata.google.internal) among
	// them. Default false.
	AllowPrivate bool `yaml:"allow_private,omitempty" json:"allow_private,omitempty"`
}

// policy is the address guard of requests under r.
func (r FetchRule) policy() netguard.Policy {
	return netguard.Policy{AllowLoopback: r.AllowLoopback, AllowPrivate: r.AllowPrivate}
}

// methods is r's methods, upper case, or the default.
func (r FetchRule) methods() []string {
	if len(r.Methods) == 0 {
		return []string{http.MethodGet, http.MethodHead}
	}
	out := make([]string, len(r.Methods))
	for i, m := range r.Methods {
		out[i] = strings.ToUpper(m)
	}
	return out
}

// withDefaults returns c with zero limits set to their defaults.
func (c FetchConfig) withDefaults() FetchConfig {
	if c.Timeout <= 0 {
		c.Timeout = DefaultFetchTimeout
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxRedirects == nil {
		n := DefaultMaxRedirects
		c.MaxRedirects = &n
	}
	return c
}

// Validate checks c without I/O; errors read "<field>: ...".
func (c FetchConfig) Validate() error { return errors.Join(c.validate("")...) }

// reservedFetchHeaders are set by http_fetch or the HTTP client.
var reservedFetchHeaders = []string{tools.CallHeader, "Host", "Content-Length", "Content-Type", "Transfer-Encoding", "Connection", "Te", "Trailer", "Upgrade", "Accept-Encoding"}

func (c FetchConfig) validate(p string) []error {
	f := &failer{p: p}
	if len(c.Allow) == 0 {
		f.fail("allow", "required: list the URL prefixes http_fetch may fetch (- prefix: https://api.example.com/v1/)")
	}
	seen := map[string]int{}
	for i, r := range c.Allow {
		rp := fmt.Sprintf("allow[%d]", i)
		u, err := parsePrefix(r.Prefix)
		switch {
		case err != nil:
			f.fail(rp+".prefix", "%v", err)
		default:
			key := u.String()
			if j, dup := seen[key]; dup {
				f.fail(rp+".prefix", "%s is allow[%d].prefix too; list each prefix once", secret.URL(r.Prefix), j)
			}
			seen[key] = i
			if err := r.policy().CheckHost(u.Hostname()); err != nil {
				f.fail(rp+".prefix", "%v; %s", err, allowHint(err, "on this entry to fetch from it"))
			}
		}
		for j, m := range r.Methods {
			switch strings.ToUpper(m) {
			case http.MethodGet, http.MethodHead, http.MethodPost:
			default:
				f.fail(fmt.Sprintf("%s.methods[%d]", rp, j), "%q: want GET, HEAD or POST", m)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
			switch {
			case !httpheader.ValidName(k):
				f.fail(rp+".headers", "%q is not a header name", k)
			case slices.Contains(reservedFetchHeaders, http.CanonicalHeaderKey(k)):
				f.fail(rp+".headers", "%s is set by http_fetch itself; remove it", k)
			case !httpheader.ValidValue(r.Headers[k]):
				f.fail(rp+".headers."+k, "the value contains a control character (check the ${...} reference)")
			}
		}
	}
	switch {
	case c.Timeout < 0:
		f.fail("timeout", "%s is negative (want e.g. 30s; 0 for the default %s)", c.Timeout, DefaultFetchTimeout)
	case c.Timeout > MaxFetchTimeout:
		f.fail("timeout", "%s is longer than %s", c.Timeout, MaxFetchTimeout)
	}
	if c.MaxBytes != 0 && (c.MaxBytes < MinMaxBytes || c.MaxBytes > MaxMaxBytes) {
		f.fail("max_bytes", "%d: want %d to %d bytes (0 for the default %d)", c.MaxBytes, MinMaxBytes, MaxMaxBytes, DefaultMaxBytes)
	}
	if n := c.MaxRedirects; n != nil && (*n < 0 || *n > MaxMaxRedirects) {
		f.fail("max_redirects", "%d: want 0 (follow none) to %d", *n, MaxMaxRedirects)
	}
	return f.errs
}

// allowHint says which setting of an allow entry would allow what err
// refused, ending with where.
func allowHint(err error, where string) string {
	var be *netguard.BlockedError
	if !errors.As(err, &be) {
		return "it is never allowed"
	}
	switch be.Kind {
	case netguard.Loopback:
		return "set allow_loopback: true " + where
	case netguard.Private, netguard.LinkLocal, netguard.Metadata:
		return "set allow_private: true " + where
	}
	return "it is never allowed"
}

// parsePrefix parses an allow-list prefix: an http(s) URL with a host, no
// user, query or fragment, and a path without dot segments.
func parsePrefix(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("required: an http(s) URL such as https://api.example.com/v1/")
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		return nil, fmt.Errorf("%q: want an http(s) URL such as https://api.example.com/v1/", secret.URL(s))
	case u.User != nil:
		return nil, fmt.Errorf("%q: put credentials in headers (Authorization: Bearer ${TOKEN}), not in the URL", secret.URL(s))
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("%q: want no query or fragment (a prefix allows every query of its paths)", secret.URL(s))
	case dotSegments(u):
		return nil, fmt.Errorf("%q: write the path without . or .. segments", secret.URL(s))
	}
	if _, err := strconv.Atoi(portOf(u)); err != nil {
		return nil, fmt.Errorf("%q: the port is not a number", secret.URL(s))
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), hostPort(u)
	if u.Path == "" {
		u.Path = "/"
	}
	return u, nil
}

// dotSegments reports whether u's path, decoded or as sent, has a "." or
// ".." segment, which a server resolves to another path than the one the
// allow-list saw.
func dotSegments(u *url.URL) bool {
	raw, err := url.PathUnescape(u.EscapedPath())
	if err != nil {
		return true
	}
	for _, p := range []string{u.Path, raw, u.EscapedPath()} {
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." {
				return true
			}
		}
	}
	return false
}

// portOf is u's port, or its scheme's.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// hostPort is u's host, lower case, without a trailing dot, and its port:
// what two URLs must share to be of the same site.
func hostPort(u *url.URL) string {
	return net.JoinHostPort(strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), portOf(u))
}

// under reports whether the path p is pre or below it.
func under(p, pre string) bool {
	if p == "" {
		p = "/"
	}
	switch {
	case p == pre:
		return true
	case strings.HasSuffix(pre, "/"):
		return strings.HasPrefix(p, pre)
	}
	return strings.HasPrefix(p, pre+"/")
}

// rule is a FetchRule, parsed.
type rule struct {
	FetchRule
	prefix  *url.URL
	methods []string
	headers http.Header
}

// fetcher is the http_fetch tool.
type fetcher struct {
	cfg      FetchConfig
	rules    []rule
	secrets  []string
	resolver *net.Resolver // nil: the system's; tests set their own
}

// FetchArgs are the arguments of http_fetch.
type FetchArgs struct {
	URL         string `json:"url" jsonschema:"description=The http(s) URL to fetch. It must be under one of the prefixes this tool lists."`
	Method      string `json:"method,omitempty" jsonschema:"enum=GET,enum=HEAD,enum=POST,default=GET,description=The HTTP method. Each prefix allows only some."`
	Body        string `json:"body,omitempty" jsonschema:"description=The request body (POST only)."`
	ContentType string `json:"content_type,omitempty" jsonschema:"description=The media type of the body (POST only; default application/json)."`
}

// Fetch returns the http_fetch tool of c. It validates c and does no I/O.
func Fetch(c FetchConfig) (tools.Spec, error) {
	f, err := newFetcher(c)
	if err != nil {
		return tools.Spec{}, err
	}
	return f.spec(), nil
}

func newFetcher(c FetchConfig) (*fetcher, error) {
	if err := errors.Join(c.validate("tools." + FetchName)...); err != nil {
		return nil, err
	}
	f := &fetcher{cfg: c.withDefaults()}
	for _, r := range c.Allow {
		u, _ := parsePrefix(r.Prefix) // validated
		h := http.Header{}
		for k, v := range r.Headers {
			h.Set(k, v)
		}
		f.rules = append(f.rules, rule{FetchRule: r, prefix: u, methods: r.methods(), headers: h})
		f.secrets = append(f.secrets, secretsOf(r.Headers)...)
	}
	return f, nil
}

func (f *fetcher) spec() tools.Spec {
	var b strings.Builder
	b.WriteString("Fetch an http(s) URL and get its status, main headers and body as text. ")
	b.WriteString("Only URLs under these prefixes can be fetched, with the methods listed; anything else is refused:")
	for _, r := range f.rules {
		fmt.Fprintf(&b, "\n- %s (%s)", secret.URL(r.Prefix), strings.Join(r.methods, ", "))
	}
	fmt.Fprintf(&b, "\nA body longer than %d bytes is cut.", f.cfg.MaxBytes)
	return tools.Func(FetchName, b.String(), f.call)
}

// match returns the rule raw is under (the one with the longest prefix),
// or an error that says why none is.
func (f *fetcher) match(raw, method string) (*url.URL, *rule, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		return nil, nil, fmt.Errorf("%q is not an http(s) URL", secret.URL(raw))
	case u.User != nil:
		return nil, nil, fmt.Errorf("%s: a URL may not hold credentials", secret.URL(raw))
	case dotSegments(u):
		return nil, nil, fmt.Errorf("%s: write the path without . or .. segments", u)
	}
	u.Fragment, u.RawFragment = "", ""
	var best *rule
	for i := range f.rules {
		r := &f.rules[i]
		if strings.EqualFold(u.Scheme, r.prefix.Scheme) && hostPort(u) == r.prefix.Host && under(u.Path, r.prefix.Path) &&
			(best == nil || len(r.prefix.Path) > len(best.prefix.Path)) {
			best = r
		}
	}
	if best == nil {
		var have []string
		for _, r := range f.rules {
			have = append(have, secret.URL(r.Prefix))
		}
		return nil, nil, fmt.Errorf("%s is not under a prefix http_fetch may fetch (tools.http_fetch.allow: %s)", u, strings.Join(have, ", "))
	}
	if !slices.Contains(best.methods, method) {
		return nil, nil, fmt.Errorf("%s is not allowed under %s, which allows %s (tools.http_fetch.allow)", method, secret.URL(best.Prefix), strings.Join(best.methods, ", "))
	}
	if err := best.policy().CheckHost(u.Hostname()); err != nil {
		return nil, nil, fmt.Errorf("%s: %v (%s)", u, err, allowHint(err, "on its tools.http_fetch.allow entry"))
	}
	return u, best, nil
}

// call is one http_fetch call: each hop is checked against the
// allow-list, then connected to through its rule's address guard.
func (f *fetcher) call(ctx context.Context, a FetchArgs) (string, error) {
	// Its own and the config's (the tool loop's): both are cut out before
	// the body is cut to max_bytes.
	secrets := append(slices.Clip(f.secrets), secret.FromContext(ctx)...)
	out, err := f.fetch(ctx, a, secrets)
	if err != nil {
		// The error may quote a response or a server's words.
		return "", redacted{err, secrets}
	}
	return secret.Redact(out, secrets), nil
}

func (f *fetcher) fetch(ctx context.Context, a FetchArgs, secrets []string) (string, error) {
	method := strings.ToUpper(a.Method)
	switch method {
	case "":
		method = http.MethodGet
	case http.MethodGet, http.MethodHead, http.MethodPost:
	default:
		return "", fmt.Errorf("method %q: want GET, HEAD or POST", a.Method)
	}
	if a.Body != "" && method != http.MethodPost {
		return "", fmt.Errorf("a body is sent with POST only, not %s", method)
	}
	ctype := a.ContentType
	if ctype == "" {
		ctype = "application/json"
	}
	tctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	// timedOut is err, or a timeout when the call's time ran out.
	timedOut := func(method string, u *url.URL, err error) error {
		if err != nil && tctx.Err() != nil && ctx.Err() == nil {
			return timeout(fmt.Errorf("%s %s: no complete answer within %s (tools.http_fetch.timeout)", method, u, f.cfg.Timeout))
		}
		return err
	}

	raw, body := a.URL, a.Body
	for hop := 0; ; hop++ {
		u, r, err := f.match(raw, method)
		if err != nil {
			if hop > 0 {
				// The first request ran: the call is not refused.
				return "", fmt.Errorf("redirected, but not followed: %w", err)
			}
			return "", refusal(fmt.Errorf("%w; nothing was fetched", err))
		}
		resp, err := f.do(tctx, r, method, u, body, ctype)
		if err != nil {
			if errors.Is(err, netguard.ErrBlocked) {
				err = fmt.Errorf("%s %s: %v (%s)", method, u, blockedCause(err), allowHint(err, "on its tools.http_fetch.allow entry"))
				if hop > 0 {
					return "", fmt.Errorf("redirected, but not followed: %w", err)
				}
				return "", refusal(fmt.Errorf("%w; nothing was sent", err))
			}
			return "", timedOut(method, u, fmt.Errorf("%s %s: %w", method, u, err))
		}
		loc := resp.Header.Get("Location")
		if !isRedirect(resp.StatusCode) || loc == "" {
			out, err := f.result(resp, method, u, hop, secrets)
			return out, timedOut(method, u, err)
		}
		_ = resp.Body.Close()
		next, err := u.Parse(loc)
		if err != nil {
			return "", fmt.Errorf("%s %s: redirected to %q, which is not a URL", method, u, loc)
		}
		if hop >= *f.cfg.MaxRedirects {
			return "", fmt.Errorf("%s %s: redirected to %s: more than %d redirects (tools.http_fetch.max_redirects), so it was not followed", method, u, next, *f.cfg.MaxRedirects)
		}
		// As browsers do: 303, and 301 and 302 after a POST, go on as a GET.
		if resp.StatusCode == http.StatusSeeOther && method != http.MethodHead ||
			(resp.StatusCode == http.StatusMovedPermanently || resp.StatusCode == http.StatusFound) && method == http.MethodPost {
			method, body = http.MethodGet, ""
		}
		raw = next.String()
	}
}

// blockedCause is the guard's own error inside a dial error: it names the
// address, and none of what is around it.
func blockedCause(err error) error {
	var be *netguard.BlockedError
	if errors.As(err, &be) {
		return be
	}
	return err
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// do sends one request under r, on a connection of its own that r's
// guard checked: no connection is shared across rules (and so across
// guards), and no proxy connects in its stead.
func (f *fetcher) do(ctx context.Context, r *rule, method string, u *url.URL, body, ctype string) (*http.Response, error) {
	d := &net.Dialer{Timeout: 10 * time.Second, Control: r.policy().Control, Resolver: f.resolver}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		DisableKeepAlives:      true,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	var rd io.Reader
	if method == http.MethodPost {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.headers {
		req.Header[k] = vs
	}
	req.Header.Set("User-Agent", "agentwork-http_fetch")
	req.Header.Set(tools.CallHeader, "http_fetch")
	if method == http.MethodPost {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	resp.Body = closer{resp.Body, tr}
	return resp, nil
}

// closer closes a response's body and then its transport's connections.
type closer struct {
	io.ReadCloser
	tr *http.Transport
}

func (c closer) Close() error {
	err := c.ReadCloser.Close()
	c.tr.CloseIdleConnections()
	return err
}

// shownHeaders are the response headers the model gets.
var shownHeaders = []string{"Content-Type", "Content-Length", "Last-Modified", "Retry-After"}

// result reads resp (up to max_bytes of its body) into the text the
// model gets, with secrets cut out of the body before it is cut (a cut
// leaves no part of one). A status of 400 or more is an error with the
// same text.
func (f *fetcher) result(resp *http.Response, method string, u *url.URL, redirects int, secrets []string) (string, error) {
	defer resp.Body.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %s\n", resp.Status)
	if redirects > 0 {
		fmt.Fprintf(&b, "URL: %s (after %d redirect%s)\n", u, redirects, plural(redirects))
	}
	for _, h := range shownHeaders {
		if v := resp.Header.Get(h); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", h, v)
		}
	}
	if method != http.MethodHead {
		// Read past max_bytes by the longest form of a secret, so one
		// across the cap is seen whole and cut out before the body is cut.
		max, margin := f.cfg.MaxBytes, secret.Margin(secrets)
		raw, err := io.ReadAll(io.LimitReader(resp.Body, int64(max+margin)+1))
		if err != nil {
			return "", fmt.Errorf("%s %s: HTTP %s, then reading the body: %w", method, u, resp.Status, err)
		}
		more := len(raw) > max+margin
		if more {
			raw = raw[:max+margin]
		}
		kept, whole := secret.Cut(string(raw), max, more, secrets)
		data, cut := []byte(kept), more || len(kept) < whole
		switch {
		case len(data) == 0:
			b.WriteString("\n(empty body)")
		case !utf8.Valid(data) || strings.ContainsRune(string(data), 0):
			fmt.Fprintf(&b, "\n[a body of %s that is not text, not shown]", sizeOf(len(data), cut, resp.ContentLength))
		default:
			b.WriteString("\n")
			b.Write(data)
			if cut {
				fmt.Fprintf(&b, "\n[body cut: the first %d bytes shown, of %s (tools.http_fetch.max_bytes)]", len(data), sizeOf(len(data), cut, resp.ContentLength))
			}
		}
	}
	if resp.StatusCode >= 400 {
		return "", errors.New(b.String())
	}
	return b.String(), nil
}

// sizeOf says how big a body was: its length, or more than what was read.
func sizeOf(read int, cut bool, length int64) string {
	switch {
	case !cut:
		return fmt.Sprintf("%d bytes", read)
	case length > 0:
		return fmt.Sprintf("%d bytes", length)
	}
	return "more"
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// kinded is err, read as it is, that is also kind (errors.Is): the
// model reads the why, without the sentinel's words, and the record gets
// the outcome kind stands for.
type kinded struct{ err, kind error }

func (k kinded) Error() string        { return k.err.Error() }
func (k kinded) Unwrap() error        { return k.err }
func (k kinded) Is(target error) bool { return target == k.kind }

// refusal is an error of a call that did nothing: its outcome is refused.
func refusal(err error) error { return kinded{err, tools.ErrRefused} }

// timeout is an error of a call that ran out of time: its outcome is
// timeout.
func timeout(err error) error { return kinded{err, tools.ErrTimeout} }

// redacted is err with secrets cut out of its text; errors.Is still sees
// through it (tools.ErrRefused, tools.ErrTimeout).
type redacted struct {
	err     error
	secrets []string
}

func (r redacted) Error() string { return secret.Redact(r.err.Error(), r.secrets) }
func (r redacted) Unwrap() error { return r.err }
