package main

import (
	"context"
	"fmt"

	"github.com/agentwork/agentwork/config"
)

func cmdConfig(_ context.Context, e *env, args []string) error {
	if len(args) == 0 {
		return usageError{"config: want check or schema"}
	}
	switch args[0] {
	case "schema":
		raw, err := config.Schema(connectorTypes())
		if err != nil {
			return err
		}
		fmt.Fprintln(e.stdout, string(raw))
		return nil
	case "check":
		fs := newFlagSet("config check", e)
		path := fs.String("config", "", "config file (default ./agentwork.yaml)")
		pos, err := parseFlags(fs, args[1:])
		if err != nil {
			return err
		}
		if *path == "" && len(pos) > 0 {
			*path = pos[0]
		}
		f, err := loadConfig(*path)
		if err != nil {
			return err
		}
		name := f.Path()
		if name == "" {
			name = "(built-in defaults)"
		}
		fmt.Fprintf(e.stdout, "%s: ok\n", name)
		return nil
	default:
		return usageError{fmt.Sprintf("config: unknown subcommand %q (want check or schema)", args[0])}
	}
}
