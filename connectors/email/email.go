// Package email is the connector that mails notifications through an SMTP
// server (a submission service on port 587 with STARTTLS, or 465 with
// implicit TLS), with net/smtp.
//
// Each notification is one plain-text mail (text/plain; charset=utf-8,
// quoted-printable) with a Message-ID made from the notification id,
// <id@agentwork>, so a mail sent twice (after a crash) carries the same
// Message-ID and mail clients that thread or deduplicate on it show it
// once. An important notification has "Importance: high" and
// "X-Priority: 1" and its subject ends in " [important]". A text is never
// split.
//
// SMTP replies map to errors as RFC 5321 classes them: 4xx (421 service
// not available, 450/451/452 try later) retryable, 5xx (535 credentials
// rejected, 550 mailbox unavailable, 554 rejected) permanent; connection
// errors are retryable. A recipient refused with 5xx is left out and the
// mail goes to the others, with a note in the receipt.
package email

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/internal/headertext"
	"github.com/agentwork/agentwork/internal/secret"
)

// TruncatedMark is appended to a text the model's token limit cut short.
const TruncatedMark = "\n\n[cut short by the model's token limit]"

// Timeout bounds one Send when ctx has no deadline.
const Timeout = time.Minute

// MessageIDDomain is the right-hand side of the Message-IDs.
const MessageIDDomain = "agentwork"

// Options configures a Connector. See Config for the fields.
type Options struct {
	Host     string
	Port     int
	TLS      string
	From     string
	To       []string
	Username string
	Password string
	Subject  string
	Helo     string
	// RootCAs verify the server's certificate. Default: the system's.
	RootCAs *x509.CertPool
	// Now stamps the Date of notifications without a time. Default
	// time.Now.
	Now func() time.Time
}

// Connector mails notifications. Each Send uses a connection of its own:
// safe for concurrent use.
type Connector struct {
	host, addr string
	tls        string
	from       *mail.Address
	to         []*mail.Address
	auth       smtp.Auth
	subject    string
	helo       string
	tlsConfig  *tls.Config
	now        func() time.Time
	secrets    []string
}

var _ connectors.Connector = (*Connector)(nil)

// New returns a Connector. It does no network I/O.
func New(opts Options) (*Connector, error) {
	cfg := Config{Host: opts.Host, Port: opts.Port, TLS: opts.TLS, From: opts.From, To: opts.To, Username: opts.Username, Password: opts.Password, Subject: opts.Subject, Helo: opts.Helo}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("email: %w", err)
	}
	c := &Connector{host: opts.Host, tls: opts.TLS, subject: opts.Subject, helo: opts.Helo, now: opts.Now}
	if c.tls == "" {
		c.tls = TLSStartTLS
	}
	port := opts.Port
	if port == 0 {
		port = DefaultPort
		if c.tls == TLSImplicit {
			port = DefaultImplicitPort
		}
	}
	c.addr = net.JoinHostPort(opts.Host, strconv.Itoa(port))
	c.from, _ = parseAddress(opts.From)
	for _, to := range opts.To {
		a, _ := parseAddress(to)
		c.to = append(c.to, a)
	}
	if c.subject == "" {
		c.subject = DefaultSubject
	}
	if c.helo == "" {
		c.helo = "localhost"
		if h, err := os.Hostname(); err == nil && h != "" && !strings.ContainsFunc(h, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
			c.helo = h
		}
	}
	if c.now == nil {
		c.now = time.Now
	}
	if opts.Username != "" {
		c.auth = smtp.PlainAuth("", opts.Username, opts.Password, opts.Host)
		c.secrets = []string{opts.Password, base64.StdEncoding.EncodeToString([]byte("\x00" + opts.Username + "\x00" + opts.Password))}
	}
	c.tlsConfig = &tls.Config{ServerName: opts.Host, MinVersion: tls.VersionTLS12, RootCAs: opts.RootCAs}
	return c, nil
}

// Send mails n to the configured recipients, or to the address n's
// target names, and returns once the server accepted it (250 after the
// data). The receipt's message id is the Message-ID.
func (c *Connector) Send(ctx context.Context, n connectors.Notification) (connectors.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return connectors.Receipt{}, fmt.Errorf("email: %w", err)
	}
	if n.SentParts >= 1 {
		return connectors.Receipt{Parts: 1}, nil // an earlier attempt delivered it
	}
	to := c.to
	if d := n.Destination(); d != "" {
		a, err := parseAddress(d)
		if err != nil {
			return connectors.Receipt{}, connectors.Permanent(fmt.Errorf("email: destination: %w", err))
		}
		to = []*mail.Address{a}
	}
	id := MessageID(n.ID)
	msg := c.message(n, to, id)
	notes, err := c.deliver(ctx, to, msg)
	if err != nil {
		return connectors.Receipt{}, err
	}
	return connectors.Receipt{Parts: 1, MessageIDs: []string{id}, Notes: notes}, nil
}

// MessageID returns the Message-ID of a notification id: <id@agentwork>
// with every character a msg-id may not hold (RFC 5322 dot-atom-text:
// letters, digits, !#$%&'*+-/?^_`{|}~ and single inner dots) and '='
// written =XX, so distinct ids stay distinct. An empty id gets a new one.
func MessageID(notificationID string) string {
	if notificationID == "" {
		notificationID = bus.NewID()
	}
	var b strings.Builder
	b.WriteByte('<')
	last := byte('<')
	for i := 0; i < len(notificationID); i++ {
		ch := notificationID[i]
		switch {
		case ch == '.' && last != '<' && last != '.' && i < len(notificationID)-1:
		case ch == '=' || !isAtext(ch):
			fmt.Fprintf(&b, "=%02X", ch)
			last = 'X'
			continue
		}
		b.WriteByte(ch)
		last = ch
	}
	b.WriteString("@" + MessageIDDomain + ">")
	return b.String()
}

// isAtext reports whether c is an RFC 5322 atext character ('.' is not).
func isAtext(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}

// message renders n as an RFC 5322 message with CRLF line ends.
func (c *Connector) message(n connectors.Notification, to []*mail.Address, id string) []byte {
	at := n.Time
	if at.IsZero() {
		at = c.now()
	}
	subject := headertext.Fill(c.subject, n.Source, n.Name)
	important := n.Urgency == "important"
	if important {
		subject += " [important]"
	}
	rcpts := make([]string, len(to))
	for i, a := range to {
		rcpts[i] = a.String()
	}
	var b bytes.Buffer
	header := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	header("Date", at.Format(time.RFC1123Z))
	header("From", c.from.String())
	header("To", strings.Join(rcpts, ",\r\n "))
	// Encoded words go on folded lines of their own.
	header("Subject", strings.ReplaceAll(headertext.Encode(subject), "?= =?", "?=\r\n =?"))
	header("Message-ID", id)
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	header("Auto-Submitted", "auto-generated")
	if important {
		header("Importance", "high")
		header("X-Priority", "1")
	}
	b.WriteString("\r\n")
	text := strings.ToValidUTF8(n.Text, "\uFFFD")
	text = strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\r", "\n")
	if n.Truncated {
		text += TruncatedMark
	}
	qp := quotedprintable.NewWriter(&b)
	_, _ = qp.Write([]byte(text))
	_ = qp.Close()
	b.WriteString("\r\n")
	return b.Bytes()
}

// deliver runs one SMTP transaction for msg and returns the notes on
// recipients the server refused.
func (c *Connector) deliver(ctx context.Context, to []*mail.Address, msg []byte) (notes []string, err error) {
	// ctx ends the session by closing the connection (below), so that the
	// error wraps ctx's; the connection's own deadline is a backstop a
	// second later, or Timeout when ctx has no deadline.
	deadline, ok := ctx.Deadline()
	if ok {
		deadline = deadline.Add(time.Second)
	} else {
		deadline = time.Now().Add(Timeout)
	}
	dialer := &net.Dialer{Deadline: deadline}
	var conn net.Conn
	if c.tls == TLSImplicit {
		conn, err = (&tls.Dialer{NetDialer: dialer, Config: c.tlsConfig}).DialContext(ctx, "tcp", c.addr)
	} else {
		conn, err = dialer.DialContext(ctx, "tcp", c.addr)
	}
	if err != nil {
		return nil, c.classify(ctx, "connect to", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	// net/smtp takes no ctx: closing the connection ends a call in flight.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	client, err := smtp.NewClient(conn, c.host)
	if err != nil {
		return nil, c.classify(ctx, "greeting of", err)
	}
	defer client.Close()
	if err := client.Hello(c.helo); err != nil {
		return nil, c.classify(ctx, "EHLO to", err)
	}
	if c.tls == TLSStartTLS {
		if ok, _ := client.Extension("STARTTLS"); !ok {
			return nil, connectors.Permanent(fmt.Errorf("email: %s offers no STARTTLS: set tls: implicit (port 465) if it speaks TLS from the start, or tls: none for a relay on this machine", c.addr))
		}
		if err := client.StartTLS(c.tlsConfig); err != nil {
			return nil, c.classify(ctx, "STARTTLS with", err)
		}
	}
	if c.auth != nil {
		if ok, _ := client.Extension("AUTH"); !ok {
			return nil, connectors.Permanent(fmt.Errorf("email: %s offers no AUTH: leave out username and password, or use the server's submission port", c.addr))
		}
		if err := client.Auth(c.auth); err != nil {
			return nil, c.classify(ctx, "AUTH with", err)
		}
	}
	if err := client.Mail(c.from.Address); err != nil {
		return nil, c.classify(ctx, "MAIL FROM to", err)
	}
	accepted := 0
	var refused error
	for _, a := range to {
		err := client.Rcpt(a.Address)
		var te *textproto.Error
		if err != nil && errors.As(err, &te) && te.Code/100 == 5 {
			notes = append(notes, fmt.Sprintf("%s refused %s: %s; mailed the other recipients", c.addr, a.Address, c.redact(replyText(te))))
			if refused == nil {
				refused = c.classify(ctx, "RCPT TO "+a.Address+" at", err)
			}
			continue
		}
		if err != nil {
			return nil, c.classify(ctx, "RCPT TO "+a.Address+" at", err)
		}
		accepted++
	}
	if accepted == 0 {
		return nil, refused
	}
	w, err := client.Data()
	if err != nil {
		return nil, c.classify(ctx, "DATA to", err)
	}
	if _, err := w.Write(msg); err != nil {
		return nil, c.classify(ctx, "sending the message to", err)
	}
	if err := w.Close(); err != nil {
		return nil, c.classify(ctx, "end of DATA at", err)
	}
	_ = client.Quit() // the server has the mail: a failed QUIT changes nothing
	return notes, nil
}

// classify maps an error of stage to a retryable or permanent error.
func (c *Connector) classify(ctx context.Context, stage string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("email: %s %s: %w", stage, c.addr, ctx.Err())
	}
	var te *textproto.Error
	msg := err.Error()
	if errors.As(err, &te) {
		msg = replyText(te)
	}
	wrapped := fmt.Errorf("email: %s %s: %s", stage, c.addr, c.redact(msg))
	var certErr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.As(err, &te) && te.Code == 535:
		return connectors.Permanent(fmt.Errorf("%w; check username and password", wrapped))
	case errors.As(err, &te) && te.Code == 530:
		return connectors.Permanent(fmt.Errorf("%w; the server wants a login: set username and password", wrapped))
	case errors.As(err, &te) && te.Code/100 == 4:
		return connectors.Retry(wrapped, 0)
	case errors.As(err, &te):
		return connectors.Permanent(wrapped)
	case errors.As(err, &certErr), errors.As(err, &unknownCA), errors.As(err, &hostErr):
		return connectors.Permanent(fmt.Errorf("%w; the server's certificate is not valid for %s", wrapped, c.host))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return connectors.Retry(fmt.Errorf("%w (the server closed the connection)", wrapped), 0)
	}
	return wrapped // network trouble: retried with backoff
}

// replyText is an SMTP reply as one line: "550 5.1.1 Mailbox unavailable".
func replyText(te *textproto.Error) string {
	msg := strings.Map(func(r rune) rune {
		if r == '\n' {
			return ' '
		}
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, te.Msg)
	if len(msg) > 300 {
		msg = strings.ToValidUTF8(msg[:300], "") + "…"
	}
	return strconv.Itoa(te.Code) + " " + msg
}

func (c *Connector) redact(s string) string { return secret.Redact(s, c.secrets) }
