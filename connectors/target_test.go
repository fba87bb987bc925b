package connectors_test

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/connectors/nats"
)

func TestCheckTarget(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"ops", "ops:-1001234567890", "team:#alerts", "mail:ops@example.com", "tg:@channel"} {
		if err := connectors.CheckTarget("targets[0]", ok); err != nil {
			t.Errorf("CheckTarget(%q) = %v, want nil", ok, err)
		}
	}
	for _, tc := range []struct{ target, says string }{
		{"Ops", "connector name"},
		{"ops:", "is empty"},
		{"ops:two words", "spaces"},
		{"ops:" + strings.Repeat("x", 300), "longer than"},
		{"", "connector name"},
	} {
		err := connectors.CheckTarget("targets[0]", tc.target)
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.HasPrefix(err.Error(), "targets[0]: ") {
			t.Errorf("CheckTarget(%q) = %v, want an error on targets[0] saying %q", tc.target, err, tc.says)
		}
	}
}

func TestNotificationID(t *testing.T) {
	t.Parallel()
	if got := connectors.NotificationID("run1", "", "ops"); got != "run1.ops" {
		t.Errorf("NotificationID without destination = %q, want run1.ops", got)
	}
	a := connectors.NotificationID("run1", "", "ops:#a")
	b := connectors.NotificationID("run1", "", "ops:#b")
	if a == b || !strings.HasPrefix(a, "run1.ops-") || strings.ContainsAny(a, "#:") {
		t.Errorf("NotificationID with destinations = %q, %q; want distinct ids of token characters", a, b)
	}
	if a != connectors.NotificationID("run1", "", "ops:#a") {
		t.Error("NotificationID is not stable")
	}
}

func TestCheckDestination(t *testing.T) {
	t.Parallel()
	if err := connectors.CheckDestination(nats.Config{Subject: "a.b"}, "team.b"); err != nil {
		t.Errorf("nats destination team.b = %v, want nil", err)
	}
	if err := connectors.CheckDestination(nats.Config{Subject: "a.b"}, "team.*"); err == nil {
		t.Error("nats destination with a wildcard = nil, want an error")
	}
	type noDest struct{ connectors.Config }
	if err := connectors.CheckDestination(noDest{}, "x"); err == nil || !strings.Contains(err.Error(), "takes no destination") {
		t.Errorf("destination for a type without one = %v, want 'takes no destination'", err)
	}
}

func TestMatchDestination(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, dest string
		want          bool
	}{
		{"*@example.com", "ops@example.com", true},
		{"*@example.com", "a.b+c@example.com", true},
		{"*@example.com", "ops@example.com.evil.org", false},
		{"*@example.com", "ops@EXAMPLE.com", false},
		{"#ops", "#ops", true},
		{"#ops", "#ops2", false},
		{"#ops-*", "#ops-", true},
		{"team.?", "team.x", true},
		{"team.?", "team.xy", false},
		{"*", "", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"ü?", "üß", true},
	} {
		if got := connectors.MatchDestination(tc.pattern, tc.dest); got != tc.want {
			t.Errorf("MatchDestination(%q, %q) = %v, want %v", tc.pattern, tc.dest, got, tc.want)
		}
	}
}

// FuzzMatchDestination: MatchDestination agrees with the regular
// expression of its pattern.
func FuzzMatchDestination(f *testing.F) {
	f.Add("*@example.com", "ops@example.com")
	f.Add("a*b?c", "aXXbYc")
	f.Add("**?*", "ab")
	f.Fuzz(func(t *testing.T, pattern, dest string) {
		if !utf8.ValidString(pattern) || !utf8.ValidString(dest) || len(pattern) > 64 || len(dest) > 256 {
			return
		}
		var re strings.Builder
		re.WriteString(`^(?s)`)
		for _, r := range pattern {
			switch r {
			case '*':
				re.WriteString(".*")
			case '?':
				re.WriteString(".")
			default:
				re.WriteString(regexp.QuoteMeta(string(r)))
			}
		}
		re.WriteString("$")
		want := regexp.MustCompile(re.String()).MatchString(dest)
		if got := connectors.MatchDestination(pattern, dest); got != want {
			t.Fatalf("MatchDestination(%q, %q) = %v, want %v", pattern, dest, got, want)
		}
	})
}
