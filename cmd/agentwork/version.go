package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set by the linker (-ldflags "-X main.version=v1.2.3").
var version = "dev"

func cmdVersion(_ context.Context, e *env, _ []string) error {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok && v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	fmt.Fprintf(e.stdout, "agentwork %s\n", v)
	return nil
}
