package main

import (
	"bytes"
	"strings"
	"testing"
)

// config check refuses an exec allow-list entry that lets the model choose
// the program, naming the entry, why, and what to allow instead.
func TestConfigCheckRefusesExecRunner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ entry, want string }{
		{"[env, -i]", `tools.exec.allow[0]: ["env","-i"]: env starts the program named by its arguments`},
		{"[python3, -c]", `tools.exec.allow[0]: ["python3","-c"]: python3 runs code given as an argument`},
		{"[find, ., -exec]", `tools.exec.allow[0]: ["find",".","-exec"]: find runs commands`},
	} {
		p := writeConfig(t, t.TempDir(), testConfig+"tools:\n  exec:\n    allow:\n      - "+tc.entry+"\n")
		var out, errOut bytes.Buffer
		err := run(t.Context(), []string{"config", "check", "--config", p}, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "allow the program") {
			t.Errorf("config check with exec allow %s = %v, want an error containing %q and what to allow instead", tc.entry, err, tc.want)
		}
	}
}
