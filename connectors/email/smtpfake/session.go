package smtpfake

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// One SMTP session: the commands, in the order a strict submission server
// takes them, and the scripted replies.

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
