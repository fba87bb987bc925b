package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/config"
)

// DefaultConfigFile is read when --config is not given and the file exists.
const DefaultConfigFile = "agentwork.yaml"

// connFlags are the flags of every client command.
type connFlags struct {
	config  string
	dataDir string
	url     string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "config file (default ./agentwork.yaml if it exists); its bus section says where the server is")
	fs.StringVar(&c.dataDir, "data-dir", "", "data dir of the running server (default from config, else .agentwork)")
	fs.StringVar(&c.url, "url", "", "NATS URL of an external cluster (default from config)")
}

// busConfig returns the bus config a client uses to reach the server.
// Only the config's bus section is read: a client needs none of the
// server's secrets.
func (c *connFlags) busConfig() (bus.Config, error) {
	f, err := config.LoadClient(configPath(c.config))
	if err != nil {
		return bus.Config{}, err
	}
	bc := f.Bus
	if c.dataDir != "" {
		bc.DataDir = c.dataDir
	} else if bc.DataDir != "" {
		bc.DataDir = f.Resolve(bc.DataDir)
	}
	if c.url != "" {
		bc.URL = c.url
	}
	return bc, nil
}

func (c *connFlags) dial(ctx context.Context) (*bus.Bus, error) {
	bc, err := c.busConfig()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return bus.Dial(dctx, bc)
}

// loadConfig loads path, or ./agentwork.yaml when path is empty and it
// exists, or the defaults.
func loadConfig(path string) (*config.File, error) {
	return config.Load(configPath(path), connectorTypes())
}

// configPath is path, or ./agentwork.yaml when path is empty and it
// exists, or "" (the defaults).
func configPath(path string) string {
	if path == "" {
		if _, err := os.Stat(DefaultConfigFile); err == nil {
			return DefaultConfigFile
		}
	}
	return path
}

func newFlagSet(name string, e *env) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parseFlags parses args, allowing flags after positional arguments
// (agentwork task send "hello" --wait).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// newLogger builds the service logger: console encoding on a terminal,
// JSON otherwise.
func newLogger(w io.Writer, level, format string) (*zap.Logger, error) {
	lvl := zapcore.InfoLevel
	if level != "" {
		if err := lvl.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("log.level: %w", err)
		}
	}
	if format == "" {
		format = "json"
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				format = "console"
			}
		}
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if format == "console" {
		ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		enc = zapcore.NewConsoleEncoder(ec)
	} else {
		enc = zapcore.NewJSONEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), lvl)), nil
}

// printJSON writes v as indented JSON (the --json output of every command).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// show returns what prints a command's result: as JSON with --json, else
// with pretty, through a buffer (a table's writer writes each cell on its
// own: 1.7 million writes for 100,000 jobs). Use it as
// show(e, *asJSON, printX)(client.Call(ctx)).
func show[T any](e *env, asJSON bool, pretty func(io.Writer, T)) func(T, error) error {
	return func(v T, err error) error {
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(e.stdout, v)
		}
		w := bufio.NewWriter(e.stdout)
		pretty(w, v)
		return w.Flush()
	}
}

// runDetail is the one-line gist of a run's outcome for history tables: the
// skip reason, the error, or what was sent (else the reply).
func runDetail(r agentwork.Result) string {
	switch r.Outcome {
	case bus.OutcomeSkip:
		if r.Detail != "" {
			return r.Reason + ": " + r.Detail
		}
		return r.Reason
	case bus.OutcomeError:
		return r.Class + ": " + r.Error
	}
	if r.Text != "" {
		return "sent: " + r.Text
	}
	return r.Reply
}

// oneLine folds white space and cuts s to n characters.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// group is a command with subcommands (cron, heartbeat, deliveries): its
// name and usage text.
type group struct{ name, usage string }

// groupFlags are the flags every subcommand of a group takes: where the
// server is, --json and --timeout.
type groupFlags struct {
	conn    connFlags
	json    *bool
	timeout *time.Duration
}

// verb handles `agentwork <group>` without a subcommand or with -h (done:
// the usage was printed, return err), and otherwise returns the
// subcommand and its flag set with the group's flags registered.
func (g group) verb(e *env, args []string) (verb string, fs *flag.FlagSet, gf *groupFlags, done bool, err error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(e.stdout, g.usage)
		if len(args) == 0 {
			return "", nil, nil, true, usageError{g.name + ": no command given"}
		}
		return "", nil, nil, true, nil
	}
	verb = args[0]
	fs = newFlagSet(g.name+" "+verb, e)
	gf = &groupFlags{}
	gf.conn.register(fs)
	gf.json = fs.Bool("json", false, "print JSON")
	gf.timeout = fs.Duration("timeout", 30*time.Second, "how long to wait for the server")
	return verb, fs, gf, false, nil
}

// quietHelp returns nil for flag.ErrHelp (-h printed the flags: a
// success), else err.
func quietHelp(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
