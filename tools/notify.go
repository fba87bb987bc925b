package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// NotifyName is the name of the notify_user tool.
const NotifyName = "notify_user"

// Urgency values of notify_user.
const (
	UrgencyInfo      = "info"
	UrgencyImportant = "important"
)

// NotifyArgs are the arguments of notify_user.
type NotifyArgs struct {
	Text    string `json:"text" jsonschema:"minLength=1,description=The message for the user: concise (under about 300 characters) and in the user's language."`
	Urgency string `json:"urgency,omitempty" jsonschema:"enum=info,enum=important,default=info,description=important only when the user should look now."`
}

// Notify returns the notify_user tool. It has no side effect: it only
// acknowledges. Delivery is decided after the run by the runner's output
// gates, which read the call from the reply, so that dedup and other gating
// stay possible.
func Notify() Spec {
	return Func(NotifyName,
		"Send a short message to the user. Call it only when something needs the user's attention; "+
			"if nothing does, do not call it and reply briefly that all is well.",
		func(_ context.Context, a NotifyArgs) (string, error) {
			if _, err := ParseNotify(a); err != nil {
				return "", err
			}
			return "acknowledged: the message will be delivered to the user", nil
		})
}

// ParseNotify checks notify_user arguments and fills defaults.
func ParseNotify(a NotifyArgs) (NotifyArgs, error) {
	if strings.TrimSpace(a.Text) == "" {
		return a, fmt.Errorf("text is empty")
	}
	switch a.Urgency {
	case "":
		a.Urgency = UrgencyInfo
	case UrgencyInfo, UrgencyImportant:
	default:
		return a, fmt.Errorf("urgency %q: want info or important", a.Urgency)
	}
	return a, nil
}

// DecodeNotify decodes raw notify_user arguments as the model sent them.
func DecodeNotify(raw string) (NotifyArgs, error) {
	var a NotifyArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		return a, fmt.Errorf("notify_user arguments: %w", err)
	}
	return ParseNotify(a)
}
