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
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
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

// session is the state of one connection.
type session struct {
	s       *Server
	conn    net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	script  *Reply
	tls     bool
	user    string
	from    string
	to      []string
	greeted bool
}

// errQuit ends a session.
var errQuit = errors.New("quit")

func (ss *session) reply(code int, lines ...string) error {
	for i, l := range lines {
		sep := "-"
		if i == len(lines)-1 {
			sep = " "
		}
		fmt.Fprintf(ss.w, "%d%s%s\r\n", code, sep, l)
	}
	return ss.w.Flush()
}

// scripted answers with the script if it is for stage: done is true when
// it did (or stalled).
func (ss *session) scripted(stage Stage) (done bool, err error) {
	if ss.script == nil || ss.script.Stage != stage {
		return false, nil
	}
	r := *ss.script
	ss.script = nil
	if r.Code == 0 {
		<-ss.s.quit // stall: no answer until the server closes
		return true, errQuit
	}
	if err := ss.reply(r.Code, r.Text); err != nil {
		return true, err
	}
	if r.Code == 421 {
		return true, errQuit
	}
	return true, nil
}

func (s *Server) serve(c net.Conn) {
	if s.opts.Implicit {
		tc := tls.Server(c, s.tlsCfg)
		if err := tc.Handshake(); err != nil {
			return
		}
		c = tc
	}
	ss := &session{s: s, conn: c, r: bufio.NewReader(c), w: bufio.NewWriter(c), script: s.nextReply(), tls: s.opts.Implicit}
	if done, _ := ss.scripted(StageGreeting); done {
		return
	}
	if ss.reply(220, "127.0.0.1 ESMTP smtpfake") != nil {
		return
	}
	for {
		line, err := ss.readLine()
		if err != nil {
			if errors.Is(err, errLineTooLong) {
				_ = ss.reply(500, "5.5.2 Line too long")
				continue
			}
			return
		}
		if err := ss.command(line); err != nil {
			return
		}
	}
}

var (
	errLineTooLong = errors.New("line too long")
	errBareLF      = errors.New("bare LF")
)

// readLine reads one CRLF-terminated line of at most 998 characters.
func (ss *session) readLine() (string, error) {
	line, err := ss.r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return "", errBareLF
	}
	line = strings.TrimSuffix(line, "\r\n")
	if len(line) > 998 {
		return line, errLineTooLong
	}
	return line, nil
}

func (ss *session) ehlo() error {
	lines := []string{"127.0.0.1 Hello", "SIZE " + strconv.Itoa(ss.s.opts.MaxSize), "ENHANCEDSTATUSCODES"}
	if ss.s.opts.TLS && !ss.tls {
		lines = append(lines, "STARTTLS")
	}
	if ss.s.opts.Username != "" && (ss.tls || !ss.s.opts.TLS) {
		lines = append(lines, "AUTH PLAIN")
	}
	return ss.reply(250, lines...)
}

// command runs one command line.
func (ss *session) command(line string) error {
	verb, arg, _ := strings.Cut(line, " ")
	verb = strings.ToUpper(verb)
	needTLS := ss.s.opts.TLS && !ss.tls
	switch verb {
	case "EHLO":
		if arg == "" {
			return ss.reply(501, "5.5.4 Syntax: EHLO hostname")
		}
		ss.greeted, ss.from, ss.to = true, "", nil
		return ss.ehlo()
	case "HELO":
		ss.greeted, ss.from, ss.to = true, "", nil
		return ss.reply(250, "127.0.0.1")
	case "NOOP":
		return ss.reply(250, "2.0.0 OK")
	case "RSET":
		ss.from, ss.to = "", nil
		return ss.reply(250, "2.0.0 OK")
	case "QUIT":
		_ = ss.reply(221, "2.0.0 Bye")
		return errQuit
	case "STARTTLS":
		if !ss.s.opts.TLS || ss.tls {
			return ss.reply(502, "5.5.1 STARTTLS not available")
		}
		if err := ss.reply(220, "2.0.0 Ready to start TLS"); err != nil {
			return err
		}
		tc := tls.Server(ss.conn, ss.s.tlsCfg)
		if err := tc.Handshake(); err != nil {
			return err
		}
		// RFC 3207: the session starts over.
		ss.conn, ss.r, ss.w, ss.tls = tc, bufio.NewReader(tc), bufio.NewWriter(tc), true
		ss.greeted, ss.user, ss.from, ss.to = false, "", "", nil
		return nil
	}
	if !ss.greeted {
		return ss.reply(503, "5.5.1 Error: send HELO/EHLO first")
	}
	if needTLS {
		return ss.reply(530, "5.7.0 Must issue a STARTTLS command first")
	}
	switch verb {
	case "AUTH":
		return ss.auth(arg)
	case "MAIL":
		if ss.s.opts.Username != "" && ss.user == "" {
			if done, err := ss.scripted(StageAuth); done {
				return err
			}
			return ss.reply(530, "5.7.0 Authentication required")
		}
		if done, err := ss.scripted(StageMail); done {
			return err
		}
		addr, params, ok := path(arg, "FROM:")
		if !ok {
			return ss.reply(501, "5.5.4 Syntax: MAIL FROM:<address>")
		}
		for _, p := range params {
			k, v, _ := strings.Cut(strings.ToUpper(p), "=")
			switch {
			case k == "SIZE":
				if n, err := strconv.Atoi(v); err == nil && n > ss.s.opts.MaxSize {
					return ss.reply(552, "5.3.4 Message size exceeds fixed limit")
				}
			default:
				return ss.reply(555, "5.5.4 Unsupported option: "+p)
			}
		}
		ss.from, ss.to = addr, nil
		return ss.reply(250, "2.1.0 Ok")
	case "RCPT":
		if ss.from == "" && len(ss.to) == 0 {
			return ss.reply(503, "5.5.1 Error: need MAIL command")
		}
		addr, _, ok := path(arg, "TO:")
		if !ok || addr == "" {
			return ss.reply(501, "5.5.4 Syntax: RCPT TO:<address>")
		}
		if ss.script != nil && ss.script.Stage == StageRcpt {
			r := *ss.script // every RCPT of the session gets it
			if r.Code == 0 {
				<-ss.s.quit
				return errQuit
			}
			return ss.reply(r.Code, r.Text)
		}
		if r, ok := ss.s.refusal(addr); ok {
			return ss.reply(r.Code, r.Text)
		}
		ss.to = append(ss.to, addr)
		return ss.reply(250, "2.1.5 Ok")
	case "DATA":
		if len(ss.to) == 0 {
			return ss.reply(554, "5.5.1 Error: no valid recipients")
		}
		if err := ss.reply(354, "End data with <CR><LF>.<CR><LF>"); err != nil {
			return err
		}
		return ss.data()
	}
	return ss.reply(502, "5.5.2 Error: command not recognized")
}

// path parses "FROM:<addr> PARAMS" (or TO:).
func path(arg, prefix string) (addr string, params []string, ok bool) {
	if len(arg) < len(prefix) || !strings.EqualFold(arg[:len(prefix)], prefix) {
		return "", nil, false
	}
	arg = strings.TrimSpace(arg[len(prefix):])
	if !strings.HasPrefix(arg, "<") {
		return "", nil, false
	}
	end := strings.IndexByte(arg, '>')
	if end < 0 {
		return "", nil, false
	}
	return arg[1:end], strings.Fields(arg[end+1:]), true
}

func (ss *session) auth(arg string) error {
	if ss.s.opts.Username == "" {
		return ss.reply(502, "5.5.1 AUTH not available")
	}
	if ss.user != "" {
		return ss.reply(503, "5.5.1 Already authenticated")
	}
	mech, resp, _ := strings.Cut(arg, " ")
	if !strings.EqualFold(mech, "PLAIN") {
		return ss.reply(504, "5.5.4 Unrecognized authentication type")
	}
	if resp == "" {
		if err := ss.reply(334, ""); err != nil {
			return err
		}
		line, err := ss.readLine()
		if err != nil {
			return err
		}
		resp = line
	}
	if done, err := ss.scripted(StageAuth); done {
		return err
	}
	raw, err := base64.StdEncoding.DecodeString(resp)
	if err != nil {
		return ss.reply(501, "5.5.2 Cannot decode response")
	}
	parts := strings.Split(string(raw), "\x00")
	if len(parts) != 3 || parts[1] != ss.s.opts.Username || parts[2] != ss.s.opts.Password {
		return ss.reply(535, "5.7.8 Authentication credentials invalid")
	}
	ss.user = parts[1]
	return ss.reply(235, "2.7.0 Authentication successful")
}

// data reads the message up to the lone dot, then checks and records it.
func (ss *session) data() error {
	var raw bytes.Buffer
	var problem string
	for {
		line, err := ss.readLine()
		switch {
		case errors.Is(err, errLineTooLong):
			problem = "5.6.0 Message contains a line longer than 998 characters"
		case errors.Is(err, errBareLF):
			// Postfix's smtpd_forbid_bare_newline: the session ends.
			_ = ss.reply(521, "5.5.2 Error: bare <LF> received")
			return errQuit
		case err != nil:
			return err
		}
		if line == "." {
			break
		}
		line = strings.TrimPrefix(line, ".") // undo dot stuffing
		raw.WriteString(line + "\r\n")
		if raw.Len() > ss.s.opts.MaxSize && problem == "" {
			problem = "5.3.4 Message size exceeds fixed limit"
		}
	}
	from, to := ss.from, ss.to
	ss.from, ss.to = "", nil
	if done, err := ss.scripted(StageData); done {
		return err
	}
	if problem != "" {
		return ss.reply(554, problem)
	}
	m, err := parse(raw.Bytes())
	if err != nil {
		return ss.reply(554, "5.6.0 "+err.Error())
	}
	m.From, m.To, m.TLS, m.User = from, to, ss.tls, ss.user
	ss.s.record(m)
	return ss.reply(250, "2.0.0 Ok: queued")
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
