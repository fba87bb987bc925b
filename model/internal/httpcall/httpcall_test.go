package httpcall

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/internal/httperr"
)

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      model.Config
		wantErr string
	}{
		{"defaults", model.Config{Model: "m", APIKey: " k\n"}, ""},
		{"wrong provider", model.Config{Provider: "other", Model: "m"}, `openai: model.provider is "other", want openai`},
		{"invalid", model.Config{Provider: "openai"}, "openai: model.model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Config("openai", "http://default", tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("Config() error = %v, want one starting %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Provider != "openai" || got.BaseURL != "http://default" || got.APIKey != "k" || got.Timeout == 0 {
				t.Errorf("Config() = %+v, want provider openai, the default base URL, the key trimmed, defaults filled", got)
			}
		})
	}
}

func TestNewRequest(t *testing.T) {
	t.Parallel()
	ep := httperr.Endpoint{Provider: "p", Where: "http://h"}
	hreq, err := NewRequest(t.Context(), ep, "http://h/x", []byte("{}"),
		map[string]string{"X-Key": "provider", "X-Only": "1"}, map[string]string{"x-key": "user", "User-Agent": "custom"})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"Content-Type": "application/json", "Accept": "application/json",
		"User-Agent": "custom", "X-Key": "user", "X-Only": "1"} {
		if got := hreq.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	_, err = NewRequest(t.Context(), ep, "http://h/\x7f", nil)
	var me *model.Error
	if !errors.As(err, &me) || me.Class != model.ClassPermanent || !strings.Contains(me.Message, "check model.base_url") {
		t.Errorf("NewRequest(bad url) error = %v, want a permanent error naming model.base_url", err)
	}
}

func TestDo(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte(`{"ok":true}`))
		case "/big":
			_, _ = w.Write([]byte(strings.Repeat("x", MaxReplyBytes+1)))
		default:
			w.WriteHeader(http.StatusTeapot)
			_, _ = w.Write([]byte(strings.Repeat("e", 100<<10)))
		}
	}))
	t.Cleanup(srv.Close)
	ep := httperr.Endpoint{Provider: "p", Where: srv.URL}
	tests := []struct {
		path     string
		status   int
		ok       bool
		bodyLen  int
		wantPerm bool
	}{
		{"/ok", 200, true, len(`{"ok":true}`), false},
		{"/err", 418, false, 64 << 10, false},
		{"/big", 200, true, 0, true},
	}
	for _, tt := range tests {
		hreq, err := NewRequest(t.Context(), ep, srv.URL+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Do(t.Context(), ep, srv.Client(), hreq)
		if tt.wantPerm {
			if model.Classify(err) != model.ClassPermanent || got.Status != tt.status {
				t.Errorf("Do(%s) = %d, %v, want status %d and a permanent error", tt.path, got.Status, err, tt.status)
			}
			continue
		}
		if err != nil || got.Status != tt.status || got.OK() != tt.ok || len(got.Body) != tt.bodyLen {
			t.Errorf("Do(%s) = %d ok=%v %d bytes, %v; want %d ok=%v %d bytes", tt.path, got.Status, got.OK(), len(got.Body), err, tt.status, tt.ok, tt.bodyLen)
		}
	}
	srv.Close()
	hreq, _ := NewRequest(t.Context(), ep, srv.URL+"/ok", nil)
	if got, err := Do(t.Context(), ep, srv.Client(), hreq); err == nil || got.Status != 0 {
		t.Errorf("Do(closed server) = %d, %v, want status 0 and an error", got.Status, err)
	}
}
