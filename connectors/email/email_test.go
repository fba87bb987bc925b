package email_test

import (
	"context"
	"errors"
	"net"
	"net/smtp"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/email"
	"github.com/agentwork/agentwork/connectors/email/smtpfake"
)

const (
	user     = "agentwork@example.com"
	password = "smtp-pass-7Q2x9Lk"
	from     = "agentwork <agentwork@example.com>"
	home     = "ops@example.com"
)

// setup starts a fake server and a connector for it: tls is the
// connector's mode (starttls and implicit with a certificate the
// connector trusts).
func setup(t *testing.T, tlsMode string, srvOpts smtpfake.Options, opts email.Options) (*email.Connector, *smtpfake.Server) {
	t.Helper()
	switch tlsMode {
	case email.TLSStartTLS:
		srvOpts.TLS = true
	case email.TLSImplicit:
		srvOpts.Implicit = true
	}
	srv := smtpfake.New(t, srvOpts)
	opts.Host, opts.Port, opts.TLS, opts.RootCAs = srv.Host, srv.Port, tlsMode, srv.RootCAs
	if opts.From == "" {
		opts.From = from
	}
	if opts.To == nil {
		opts.To = []string{home}
	}
	c, err := email.New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c, srv
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{email.TLSStartTLS, email.TLSImplicit, email.TLSNone} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			connectortest.Run(t, connectortest.Harness{
				New: func(t *testing.T) (connectors.Connector, connectortest.Observer) {
					c, srv := setup(t, mode, smtpfake.Options{Username: user, Password: password}, email.Options{Username: user, Password: password})
					return c, srv
				},
				Secret: password,
				Features: connectortest.Features{
					Concurrent: true, MessageIDs: true, KeepsID: true, Destination: "team-b@example.com",
					Outages: true, AuthErrors: true, BadRequests: true, Stalls: true,
				},
			})
		})
	}
}

// The mail as a mail client reads it.
func TestMessage(t *testing.T) {
	t.Parallel()
	c, srv := setup(t, email.TLSStartTLS, smtpfake.Options{Username: user, Password: password}, email.Options{
		Username: user, Password: password, To: []string{home, "Zoë <zoe@example.com>"},
	})
	text := "Disk /var is 95% full\n.hidden line starting with a dot\ntrailing spaces   \n" +
		strings.Repeat("a long line without breaks ", 20) + "\nGröße: 日本語 🚀 =?utf-8?q?x?= \r\nlast"
	n := connectortest.Notification(text)
	n.Urgency, n.Truncated = "important", true
	rec, err := c.Send(t.Context(), n)
	if err != nil {
		t.Fatalf("Send = %v", err)
	}
	mails := srv.Mails()
	if len(mails) != 1 {
		t.Fatalf("server holds %d mails, want 1", len(mails))
	}
	m := mails[0]
	want := strings.ReplaceAll(text, "\r\n", "\n") + email.TruncatedMark
	if m.Text != want {
		t.Errorf("body = %q\nwant   %q", m.Text, want)
	}
	if m.Subject != "agentwork: heartbeat/default [important]" {
		t.Errorf("Subject = %q", m.Subject)
	}
	wantID := "<0195f3a0-7d2c-7e51-9b2a-3c1f0d4e5a6b.conformance@agentwork>"
	for k, v := range map[string]string{
		"Message-ID": wantID, "Importance": "high", "X-Priority": "1", "Auto-Submitted": "auto-generated",
		"MIME-Version": "1.0", "Content-Type": "text/plain; charset=utf-8", "Content-Transfer-Encoding": "quoted-printable",
		"From": `"agentwork" <agentwork@example.com>`, "Date": "Sat, 21 Nov 2026 09:00:03 +0000",
	} {
		if got := m.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	to, err := m.Header.AddressList("To")
	if err != nil || len(to) != 2 || to[0].Address != home || to[1].Name != "Zoë" {
		t.Errorf("To = %v, %v; want ops@ and Zoë", to, err)
	}
	if !slices.Equal(m.To, []string{home, "zoe@example.com"}) || m.From != "agentwork@example.com" || !m.TLS || m.User != user {
		t.Errorf("envelope from %s to %v (TLS %v, user %q), want TLS and the login", m.From, m.To, m.TLS, m.User)
	}
	if !slices.Equal(rec.MessageIDs, []string{wantID}) || rec.Parts != 1 {
		t.Errorf("Receipt = %+v, want the Message-ID", rec)
	}
	for i, line := range strings.Split(string(m.Raw), "\r\n") {
		if len(line) > 78 {
			t.Errorf("line %d is %d characters, want at most 78: %q", i, len(line), line)
		}
	}
}

func TestSubject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		subject string
		n       func(*connectors.Notification)
		want    string
	}{
		{"", nil, "agentwork: heartbeat/default"},
		{"", func(n *connectors.Notification) { n.Source, n.Name = "task", "" }, "agentwork: task"},
		{"[{source}] {name} report", func(n *connectors.Notification) { n.Source, n.Name = "cron", "sales" }, "[cron] sales report"},
		{"Größe {name}: " + strings.Repeat("日本語", 30), nil, "Größe default: " + strings.Repeat("日本語", 30)},
		{"=?utf-8?q?pwned?=", nil, "=?utf-8?q?pwned?="},
		{"", func(n *connectors.Notification) { n.Name = "a\r\nBcc: evil@example.com" }, "agentwork: heartbeat/a  Bcc: evil@example.com"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			c, srv := setup(t, email.TLSNone, smtpfake.Options{}, email.Options{Subject: tc.subject})
			n := connectortest.Notification("x")
			if tc.n != nil {
				tc.n(&n)
			}
			if _, err := c.Send(t.Context(), n); err != nil {
				t.Fatalf("Send = %v", err)
			}
			m := srv.Mails()[0]
			if m.Subject != tc.want {
				t.Errorf("Subject = %q, want %q", m.Subject, tc.want)
			}
			if m.Header.Get("Bcc") != "" {
				t.Error("a header was injected through the subject")
			}
		})
	}
}

// dotAtom is RFC 5322's msg-id: "<" dot-atom-text "@" dot-atom-text ">".
var dotAtom = regexp.MustCompile("^<[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@agentwork>$")

func TestMessageID(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for in, want := range map[string]string{
		"0195f3a0-7d2c.ops-1a2b": "<0195f3a0-7d2c.ops-1a2b@agentwork>",
		"run.alert.ops":          "<run.alert.ops@agentwork>",
		".lead":                  "<=2Elead@agentwork>",
		"trail.":                 "<trail=2E@agentwork>",
		"a..b":                   "<a.=2Eb@agentwork>",
		"a=b":                    "<a=3Db@agentwork>",
		"a=3Db":                  "<a=3D3Db@agentwork>",
		"a b<c>@d\"é":            "<a=20b=3Cc=3E=40d=22=C3=A9@agentwork>",
	} {
		got := email.MessageID(in)
		if got != want {
			t.Errorf("MessageID(%q) = %q, want %q", in, got, want)
		}
		if !dotAtom.MatchString(got) {
			t.Errorf("MessageID(%q) = %q, not a valid msg-id", in, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("MessageID(%q) = MessageID(%q)", in, other)
		}
		seen[got] = in
	}
	if got := email.MessageID(""); !dotAtom.MatchString(got) {
		t.Errorf("MessageID(\"\") = %q, want a fresh valid id", got)
	}
}

// Each SMTP answer maps to retryable or permanent; none quotes the
// password.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		reply     *smtpfake.Reply
		tls       string
		srv       smtpfake.Options
		opts      email.Options
		permanent bool
		says      string
	}{
		{name: "421 at the greeting", reply: &smtpfake.Reply{Code: 421}, says: "421"},
		{name: "451 greylisting at RCPT", reply: &smtpfake.Reply{Code: 451}, says: "451 4.7.1"},
		{name: "452 at RCPT", reply: &smtpfake.Reply{Code: 452}, says: "452"},
		{name: "451 after the data", reply: &smtpfake.Reply{Code: 451, Stage: smtpfake.StageData}, says: "end of DATA"},
		{name: "550 at RCPT", reply: &smtpfake.Reply{Code: 550}, permanent: true, says: "550 5.1.1"},
		{name: "554 after the data", reply: &smtpfake.Reply{Code: 554}, permanent: true, says: "554"},
		{name: "535 wrong password", srv: smtpfake.Options{Username: user, Password: "other-pass"}, opts: email.Options{Username: user, Password: password}, permanent: true, says: "check username and password"},
		{name: "530 login needed", srv: smtpfake.Options{Username: user, Password: password}, permanent: true, says: "set username and password"},
		{name: "no STARTTLS offered", tls: "plain server", permanent: true, says: "offers no STARTTLS"},
		{name: "no AUTH offered", srv: smtpfake.Options{}, opts: email.Options{Username: user, Password: password}, permanent: true, says: "offers no AUTH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mode := email.TLSStartTLS
			if tc.tls == "plain server" {
				srv := smtpfake.New(t, smtpfake.Options{})
				c, err := email.New(email.Options{Host: srv.Host, Port: srv.Port, From: from, To: []string{home}})
				if err != nil {
					t.Fatal(err)
				}
				check(t, c, tc.permanent, tc.says)
				return
			}
			c, srv := setup(t, mode, tc.srv, tc.opts)
			if tc.reply != nil {
				srv.AnswerNext(1, *tc.reply)
			}
			check(t, c, tc.permanent, tc.says)
			if got := len(srv.Mails()); got != 0 {
				t.Errorf("server holds %d mails after a failed send", got)
			}
		})
	}
}

func check(t *testing.T, c *email.Connector, permanent bool, says string) {
	t.Helper()
	_, err := c.Send(t.Context(), connectortest.Notification("x"))
	if err == nil {
		t.Fatal("Send = nil, want an error")
	}
	if got := connectors.IsPermanent(err); got != permanent {
		t.Errorf("Send = %v: permanent %v, want %v", err, got, permanent)
	}
	if !strings.Contains(err.Error(), says) {
		t.Errorf("Send = %v, want it to say %q", err, says)
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("Send = %v, which quotes the password", err)
	}
}

// A certificate the connector does not trust is permanent.
func TestUntrustedCertificate(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{email.TLSStartTLS, email.TLSImplicit} {
		srv := smtpfake.New(t, smtpfake.Options{TLS: mode == email.TLSStartTLS, Implicit: mode == email.TLSImplicit})
		c, err := email.New(email.Options{Host: srv.Host, Port: srv.Port, TLS: mode, From: from, To: []string{home}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Send(t.Context(), connectortest.Notification("x"))
		if !connectors.IsPermanent(err) || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: Send to an untrusted server = %v, want a permanent certificate error", mode, err)
		}
	}
}

// A server that is down is retryable.
func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c, err := email.New(email.Options{Host: "127.0.0.1", Port: port, TLS: email.TLSNone, From: from, To: []string{home}, Username: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Send(t.Context(), connectortest.Notification("x"))
	if err == nil || connectors.IsPermanent(err) || strings.Contains(err.Error(), password) {
		t.Fatalf("Send to a closed port = %v, want a retryable error", err)
	}
}

// One recipient refused: the mail goes to the others, and the receipt
// says so; all refused: permanent.
func TestRecipientRefused(t *testing.T) {
	t.Parallel()
	c, srv := setup(t, email.TLSNone, smtpfake.Options{}, email.Options{To: []string{home, "gone@example.com"}})
	srv.Refuse("gone@example.com", smtpfake.Reply{Code: 550})
	rec, err := c.Send(t.Context(), connectortest.Notification("x"))
	if err != nil {
		t.Fatalf("Send with one refused recipient = %v", err)
	}
	if len(rec.Notes) != 1 || !strings.Contains(rec.Notes[0], "gone@example.com") || !strings.Contains(rec.Notes[0], "550") {
		t.Errorf("Receipt.Notes = %q, want a note on gone@example.com", rec.Notes)
	}
	if m := srv.Mails(); len(m) != 1 || !slices.Equal(m[0].To, []string{home}) {
		t.Errorf("mails = %+v, want one to %s", m, home)
	}
	srv.Refuse(home, smtpfake.Reply{Code: 550})
	if _, err := c.Send(t.Context(), connectortest.Notification("y")); !connectors.IsPermanent(err) {
		t.Errorf("Send with every recipient refused = %v, want permanent", err)
	}
	srv.Recover()
	srv.Refuse("gone@example.com", smtpfake.Reply{Code: 450})
	if _, err := c.Send(t.Context(), connectortest.Notification("z")); err == nil || connectors.IsPermanent(err) {
		t.Errorf("Send with a recipient deferred (450) = %v, want retryable", err)
	}
}

// A server that never greets: ctx's deadline ends the Send promptly.
func TestStallAtGreeting(t *testing.T) {
	t.Parallel()
	c, srv := setup(t, email.TLSNone, smtpfake.Options{}, email.Options{})
	srv.AnswerNext(1, smtpfake.Reply{Code: 0, Stage: smtpfake.StageGreeting})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Send(ctx, connectortest.Notification("x"))
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Send to a silent server = %v after %s, want DeadlineExceeded promptly", err, time.Since(start))
	}
}

// The fake is strict: a bare LF and 8-bit data are refused.
func TestFakeStrict(t *testing.T) {
	t.Parallel()
	srv := smtpfake.New(t, smtpfake.Options{})
	for _, tc := range []struct{ name, msg, want string }{
		{"8-bit", "From: a@example.com\r\nDate: Sat, 21 Nov 2026 09:00:03 +0000\r\nMessage-ID: <1@x>\r\n\r\nGröße\r\n", "5.6.0 8-bit"},
		{"no Message-ID", "From: a@example.com\r\nDate: Sat, 21 Nov 2026 09:00:03 +0000\r\n\r\nx\r\n", "no Message-ID"},
		{"bare LF", "From: a@example.com\r\nDate: Sat, 21 Nov 2026 09:00:03 +0000\r\nMessage-ID: <1@x>\r\n\r\na\nb\r\n", "521"},
	} {
		cl, err := smtp.Dial(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Mail("a@example.com"); err != nil {
			t.Fatal(err)
		}
		if err := cl.Rcpt(home); err != nil {
			t.Fatal(err)
		}
		w, err := cl.Data()
		if err != nil {
			t.Fatal(err)
		}
		// DotWriter turns a bare LF into CRLF: write the raw bytes
		// through the text connection instead for that case.
		if tc.name == "bare LF" {
			_, _ = cl.Text.W.WriteString(tc.msg + ".\r\n")
			_ = cl.Text.W.Flush()
			_, _, err = cl.Text.ReadResponse(250)
		} else {
			_, _ = w.Write([]byte(tc.msg))
			err = w.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: end of DATA = %v, want %q", tc.name, err, tc.want)
		}
		cl.Close()
	}
	if len(srv.Mails()) != 0 {
		t.Errorf("the fake accepted %d bad mails", len(srv.Mails()))
	}
}

func TestType(t *testing.T) {
	t.Parallel()
	srv := smtpfake.New(t, smtpfake.Options{Username: user, Password: password})
	types := connectors.Types{email.Type}
	src := "mail: {type: email, host: 127.0.0.1, port: " + strconv.Itoa(srv.Port) + ", tls: none, from: '" + from + "', to: [" + home + "], username: " + user + ", password: " + password + "}"
	cs := connectortest.Decode(t, types, src)
	if err := connectors.CheckDestination(cs["mail"], "oncall@example.com"); err != nil {
		t.Errorf("CheckDestination = %v", err)
	}
	c, err := types.Build("mail", cs["mail"], connectors.BuildDeps{})
	if err != nil {
		t.Fatalf("Build = %v", err)
	}
	n := connectortest.Notification("hello")
	n.Target = "mail:oncall@example.com"
	if _, err := c.Send(t.Context(), n); err != nil {
		t.Fatalf("Send = %v", err)
	}
	if m := srv.Mails(); len(m) != 1 || !slices.Equal(m[0].To, []string{"oncall@example.com"}) {
		t.Errorf("mails = %+v, want one to the target's address", m)
	}
	if d := email.Type.Default().(email.Config); d.TLS != email.TLSStartTLS || d.Subject != email.DefaultSubject {
		t.Errorf("Type.Default() = %+v", d)
	}
}

// FuzzMessageID: every id makes a valid msg-id from which the id can be
// read back (=XX undone), so two ids never share one.
func FuzzMessageID(f *testing.F) {
	for _, s := range []string{"0195f3a0-7d2c.ops", ".a.", "a..b", "a=3D", "é<>@\"", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if id == "" {
			return
		}
		got := email.MessageID(id)
		if !dotAtom.MatchString(got) {
			t.Fatalf("MessageID(%q) = %q, not a valid msg-id", id, got)
		}
		enc := strings.TrimSuffix(strings.TrimPrefix(got, "<"), "@agentwork>")
		var b strings.Builder
		for i := 0; i < len(enc); i++ {
			if enc[i] == '=' {
				v, err := strconv.ParseUint(enc[i+1:i+3], 16, 8)
				if err != nil {
					t.Fatalf("MessageID(%q) = %q: bad escape at %d", id, got, i)
				}
				b.WriteByte(byte(v))
				i += 2
				continue
			}
			b.WriteByte(enc[i])
		}
		if b.String() != id {
			t.Fatalf("MessageID(%q) = %q, which reads back as %q", id, got, b.String())
		}
	})
}
