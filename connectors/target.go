package connectors

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"

	"github.com/agentwork/agentwork/bus"
)

// A target names where a notification goes: a connector, optionally with a
// destination that overrides the connector's configured one, after a colon:
//
//	ops                 the connector ops, to its configured chat
//	ops:-1001234567890  the connector ops, to that Telegram chat
//	team:#alerts        the connector team, to that Slack channel
//
// so one connector (one bot token) serves several chats. What a destination
// means is the connector type's: a chat id, a channel, a topic, an address
// (see its DestinationChecker).

// MaxDestination is the longest destination, in bytes.
const MaxDestination = 256

// SplitTarget returns the connector name and the destination of target
// ("" when it names none).
func SplitTarget(target string) (name, dest string) {
	name, dest, _ = strings.Cut(target, ":")
	return name, dest
}

// CheckTarget checks target's syntax: a connector name (a subject token)
// and an optional destination of printable characters without spaces.
// field names it in the error.
func CheckTarget(field, target string) error {
	name, dest, has := strings.Cut(target, ":")
	if !bus.ValidToken(name) {
		return fmt.Errorf("%s: %q: want a connector name (1-64 characters of a-z, 0-9, _ and -), optionally followed by :<destination>, e.g. ops or ops:-1001234567890", field, target)
	}
	if !has {
		return nil
	}
	if dest == "" {
		return fmt.Errorf("%s: %q: the destination after ':' is empty; leave out the ':' to use the connector's own destination", field, target)
	}
	if len(dest) > MaxDestination {
		return fmt.Errorf("%s: %q: the destination is longer than %d bytes", field, name, MaxDestination)
	}
	for _, r := range dest {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("%s: %q: the destination may not hold spaces or control characters", field, target)
		}
	}
	return nil
}

// DestinationChecker is an optional capability of a connector Config: a
// connector type whose targets may carry a destination checks one with
// CheckDestination (no I/O), saying what it wants ("a chat id such as
// -1001234567890 or @channel"). A type without it takes no destination.
type DestinationChecker interface {
	CheckDestination(dest string) error
}

// CheckDestination checks the destination of a target for connector c.
func CheckDestination(c Config, dest string) error {
	if dest == "" {
		return nil
	}
	dc, ok := c.(DestinationChecker)
	if !ok {
		return fmt.Errorf("this connector type takes no destination; name the connector alone")
	}
	return dc.CheckDestination(dest)
}

// MatchDestination reports whether dest matches pattern, a destination
// pattern of a webhook grant's targets: * matches any run of characters
// (dots, slashes and @ included), ? any one character, everything else
// itself. "*@example.com" matches every address at example.com,
// "#ops-*" every Slack channel whose name starts ops-.
func MatchDestination(pattern, dest string) bool {
	p, s := []rune(pattern), []rune(dest)
	// Iterative wildcard match: on a mismatch, go back to the last star
	// and let it take one more character (linear in practice, never
	// exponential).
	pi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi, mark = star+1, mark+1
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// BusChecker is an optional capability of a connector Config whose subject
// and destinations are subjects on agentwork's own bus (type nats): only
// with the bus's subjects can it tell one of agentwork's own, which a
// notification must never reach (a request would start a run, a control
// subject pause the heartbeat). Validate and CheckDestination cannot, as
// the prefix is bus.prefix.
type BusChecker interface {
	// CheckBus checks the connector's configured subject when dest is "",
	// else dest.
	CheckBus(sub bus.Subjects, dest string) error
}

// CheckDestinationOn is CheckDestination for a runtime whose bus has the
// subjects sub: a BusChecker's destination must also be none of the bus's
// own.
func CheckDestinationOn(c Config, sub bus.Subjects, dest string) error {
	if err := CheckDestination(c, dest); err != nil || dest == "" {
		return err
	}
	if bc, ok := c.(BusChecker); ok {
		return bc.CheckBus(sub, dest)
	}
	return nil
}

// targetKey is target as a subject token and KV key part: the connector
// name, and a hash of the destination, which may hold any character.
func targetKey(target string) string {
	name, dest := SplitTarget(target)
	if dest == "" {
		return name
	}
	sum := sha256.Sum256([]byte(dest))
	return name + "-" + hex.EncodeToString(sum[:6])
}

// NotificationID is the id of the notification of run (and kind: "" for
// the run's notification, ".alert" for an alert) for target: stable across
// attempts, unique per target.
func NotificationID(runID, kind, target string) string {
	return runID + kind + "." + targetKey(target)
}
