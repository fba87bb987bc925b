//go:build !unix

package builtin

import (
	"context"
	"errors"
	"time"
)

// execSupported: exec needs process groups, to kill what a command
// started.
const execSupported = false

func run(context.Context, string, []string, []string, string, time.Duration, int) (result, error) {
	return result{}, errors.New("exec is not available on this system")
}
