// Package smtpfake is an SMTP server for tests, in process on 127.0.0.1:
// EHLO/HELO, STARTTLS (with a self-signed certificate it makes), AUTH
// PLAIN, MAIL, RCPT, DATA, RSET, NOOP and QUIT, with the replies and
// enhanced status codes of RFC 5321, RFC 3207, RFC 4954 and RFC 3463. It
// parses each mail it accepts (headers, the text/plain body decoded) and
// records it (a connectortest.Observer), and can be scripted to answer a
// stage with a given reply or not at all (its connectortest.Script:
// Inject, FailNext, Fail, AnswerNext, Recover).
//
// It is as strict as a careful submission server: STARTTLS before
// anything else when it offers TLS, AUTH only over TLS, a login before
// MAIL when it has a user, lines of at most 998 characters ending in CRLF
// (a bare LF is refused, as Postfix does against SMTP smuggling), no 8-bit
// data (it offers neither 8BITMIME nor SMTPUTF8: headers must be RFC 2047
// encoded, bodies quoted-printable or base64), and From, Date and
// Message-ID present.
package smtpfake

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors/connectortest"
)

// Options configures a Server.
type Options struct {
	// TLS offers STARTTLS, and then requires it before AUTH and MAIL.
	TLS bool
	// Implicit speaks TLS from the first byte (port 465 style).
	Implicit bool
	// Username and Password, when set, are the one login AUTH PLAIN takes,
	// and MAIL requires it.
	Username, Password string
	// MaxSize is the largest message (SIZE). Default 10 MB.
	MaxSize int
}

// Stage is the point of a session where a scripted reply is given.
type Stage string

// The stages.
const (
	StageGreeting Stage = "greeting" // instead of 220, then the connection closes
	StageAuth     Stage = "auth"     // instead of 235 (at MAIL if the client does not log in)
	StageMail     Stage = "mail"     // instead of 250 to MAIL FROM
	StageRcpt     Stage = "rcpt"     // instead of 250 to every RCPT TO
	StageData     Stage = "data"     // instead of 250 after the message
)

// Reply is a scripted answer. Code 0 answers nothing: the server stalls
// until the client hangs up or the test ends.
type Reply struct {
	Code  int
	Text  string // default: the usual text for Code
	Stage Stage  // default: the stage Code is usually given at
}

// The usual text and stage of the codes a script uses.
var usual = map[int]struct {
	text  string
	stage Stage
}{
	421: {"4.3.2 Service not available, closing transmission channel", StageGreeting},
	450: {"4.2.1 Mailbox temporarily unavailable", StageRcpt},
	451: {"4.7.1 Greylisted, please try again later", StageRcpt},
	452: {"4.3.1 Insufficient system storage", StageRcpt},
	530: {"5.7.0 Authentication required", StageMail},
	535: {"5.7.8 Authentication credentials invalid", StageAuth},
	550: {"5.1.1 Mailbox unavailable", StageRcpt},
	552: {"5.3.4 Message size exceeds fixed limit", StageData},
	554: {"5.6.0 Message rejected", StageData},
}

func (r Reply) withDefaults() Reply {
	if u, ok := usual[r.Code]; ok {
		if r.Text == "" {
			r.Text = u.text
		}
		if r.Stage == "" {
			r.Stage = u.stage
		}
	}
	if r.Code == 0 && r.Stage == "" {
		r.Stage = StageData
	}
	if r.Text == "" {
		r.Text = "scripted reply"
	}
	if r.Stage == "" {
		r.Stage = StageMail
	}
	return r
}

// Mail is a message as the server received it.
type Mail struct {
	From   string   // MAIL FROM
	To     []string // RCPT TO, in order
	Header mail.Header
	// Subject is the Subject header decoded.
	Subject string
	// Text is the body decoded, line ends as LF, without the line end
	// that ends every SMTP message.
	Text string
	Raw  []byte
	// TLS: the session was encrypted; User: the login, if any.
	TLS  bool
	User string
}

// Server is the fake SMTP server. Its Script answers sessions (Requests
// counts them) with a Reply: for a fault, Unavailable is 421 at the
// greeting, RateLimited 421 too (SMTP has no retry-after), Unauthorized
// 535 at AUTH, BadRequest 554 after the data, Stall no answer after the
// data. Safe for concurrent use.
type Server struct {
	connectortest.Recorder
	*connectortest.Script[Reply]
	// Host and Port are where it listens (127.0.0.1); Addr is both.
	Host string
	Port int
	Addr string
	// RootCAs trust the server's certificate (for 127.0.0.1, ::1 and
	// localhost), when Options.TLS or Implicit.
	RootCAs *x509.CertPool

	opts   Options
	tlsCfg *tls.Config
	ln     net.Listener
	quit   chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]bool
	mails  []Mail
	refuse map[string]Reply // by recipient address
}

var (
	_ connectortest.Observer      = (*Server)(nil)
	_ connectortest.FaultInjector = (*Server)(nil)
)

// New starts a Server on 127.0.0.1:0, stopped at t's cleanup.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.MaxSize == 0 {
		opts.MaxSize = 10 << 20
	}
	s := &Server{Script: connectortest.NewScript(faultReply), opts: opts, quit: make(chan struct{}), conns: map[net.Conn]bool{}}
	if opts.TLS || opts.Implicit {
		cert, pool, err := selfSigned()
		if err != nil {
			t.Fatalf("smtpfake: certificate: %v", err)
		}
		s.tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		s.RootCAs = pool
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("smtpfake: listen: %v", err)
	}
	s.ln = ln
	s.Addr = ln.Addr().String()
	s.Host = "127.0.0.1"
	s.Port = ln.Addr().(*net.TCPAddr).Port
	s.wg.Go(s.accept)
	t.Cleanup(s.Close)
	return s
}

// Close stops the server and ends every session.
func (s *Server) Close() {
	s.mu.Lock()
	select {
	case <-s.quit:
		s.mu.Unlock()
		return
	default:
	}
	close(s.quit)
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

// selfSigned makes a certificate for 127.0.0.1, ::1 and localhost and a
// pool that trusts it.
func selfSigned() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "smtpfake"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

// faultReply is the server's Reply to f (see Server).
func faultReply(f connectortest.Fault) Reply {
	switch f.Kind {
	case connectortest.Unavailable:
		return Reply{Code: 421}
	case connectortest.RateLimited:
		return Reply{Code: 421, Text: "4.7.0 Too many connections, slow down"}
	case connectortest.Unauthorized:
		return Reply{Code: 535}
	case connectortest.BadRequest:
		return Reply{Code: 554}
	case connectortest.Stall:
		return Reply{Code: 0, Stage: StageData}
	}
	panic(fmt.Sprintf("smtpfake: unknown fault %s", f.Kind))
}

// Recover ends every scripted reply and Refuse.
func (s *Server) Recover() {
	s.Script.Recover()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse = nil
}

// Refuse makes RCPT TO addr get r (code 4xx or 5xx) in every session,
// until Recover: one recipient of several refused.
func (s *Server) Refuse(addr string, r Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse == nil {
		s.refuse = map[string]Reply{}
	}
	s.refuse[strings.ToLower(addr)] = r.withDefaults()
}

func (s *Server) refusal(addr string) (Reply, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refuse[strings.ToLower(addr)]
	return r, ok
}

// Mails returns the mails the server accepted, in order.
func (s *Server) Mails() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.mails)
}

// nextReply returns the scripted reply of a new session, if any.
func (s *Server) nextReply() *Reply {
	r, ok := s.Next()
	if !ok {
		return nil
	}
	r = r.withDefaults()
	return &r
}

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		select {
		case <-s.quit:
			s.mu.Unlock()
			c.Close()
			return
		default:
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			s.serve(c)
		})
	}
}

func (s *Server) record(m Mail) {
	s.mu.Lock()
	s.mails = append(s.mails, m)
	s.mu.Unlock()
	urgency := "info"
	if strings.EqualFold(m.Header.Get("Importance"), "high") || strings.HasPrefix(strings.TrimSpace(m.Header.Get("X-Priority")), "1") {
		urgency = "important"
	}
	s.Add(connectortest.Message{Text: m.Text, Urgency: urgency, ID: notificationID(m.Header.Get("Message-ID")), Destination: strings.Join(m.To, ",")})
}

// notificationID undoes the connector's Message-ID encoding: <id@host>
// with =XX for the characters a msg-id may not hold.
func notificationID(msgID string) string {
	s := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(msgID), "<"), ">")
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		s = s[:i]
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '=' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

var wordDecoder = mime.WordDecoder{}

// parse checks and decodes a message.
func parse(raw []byte) (Mail, error) {
	for i, c := range raw {
		if c >= 0x80 {
			return Mail{}, fmt.Errorf("8-bit byte at offset %d without BODY=8BITMIME", i)
		}
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return Mail{}, fmt.Errorf("unparsable message: %v", err)
	}
	m := Mail{Header: msg.Header, Raw: raw}
	for _, h := range []string{"From", "Date", "Message-ID"} {
		if msg.Header.Get(h) == "" {
			return Mail{}, fmt.Errorf("no %s header", h)
		}
	}
	if _, err := msg.Header.Date(); err != nil {
		return Mail{}, fmt.Errorf("header Date: %v", err)
	}
	if m.Subject, err = wordDecoder.DecodeHeader(msg.Header.Get("Subject")); err != nil {
		return Mail{}, fmt.Errorf("header Subject: %v", err)
	}
	ct := msg.Header.Get("Content-Type")
	if ct == "" {
		ct = "text/plain; charset=us-ascii"
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "text/plain" {
		return Mail{}, fmt.Errorf("header Content-Type %q: want text/plain", ct)
	}
	if cs := strings.ToLower(params["charset"]); cs != "utf-8" && cs != "us-ascii" {
		return Mail{}, fmt.Errorf("charset %q: want utf-8", cs)
	}
	var body io.Reader = msg.Body
	switch cte := strings.ToLower(msg.Header.Get("Content-Transfer-Encoding")); cte {
	case "quoted-printable":
		body = quotedprintable.NewReader(body)
	case "base64":
		body = base64.NewDecoder(base64.StdEncoding, newlineStripper{body})
	case "", "7bit", "8bit":
	default:
		return Mail{}, fmt.Errorf("header Content-Transfer-Encoding %q: want quoted-printable, base64, 7bit or 8bit", cte)
	}
	text, err := io.ReadAll(body)
	if err != nil {
		return Mail{}, fmt.Errorf("body: %v", err)
	}
	t := strings.ReplaceAll(string(text), "\r\n", "\n")
	m.Text = strings.TrimSuffix(t, "\n")
	return m, nil
}

// newlineStripper drops CR and LF, for base64 bodies.
type newlineStripper struct{ r io.Reader }

func (n newlineStripper) Read(p []byte) (int, error) {
	k, err := n.r.Read(p)
	j := 0
	for _, c := range p[:k] {
		if c != '\r' && c != '\n' {
			p[j] = c
			j++
		}
	}
	return j, err
}
