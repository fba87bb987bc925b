package main

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// TestConsoleSessionSurvivesRestartInBrowser logs in, stops the binary,
// starts it again on the same data dir and reloads the page: the session
// lives on the bus, so the browser is still logged in.
func TestConsoleSessionSurvivesRestartInBrowser(t *testing.T) {
	b := startBrowser(t, `
bus:
  listen: 127.0.0.1:0
console:
  session_idle: 1h
  session_max: 24h
`)
	b.login()
	var session *network.Cookie
	for _, c := range b.cookies() {
		if c.Name == "agentwork_session" {
			session = c
		}
	}
	if session == nil || !session.HTTPOnly || session.SameSite != network.CookieSameSiteStrict {
		t.Fatalf("session cookie = %+v, want HttpOnly and SameSite=Strict", session)
	}

	// Stop the server as a service manager would, and start it again.
	if err := b.srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = b.srv.cmd.Wait()
	b.srv.restart()
	waitFor(t, 30*time.Second, "a ready HTTP server after the restart", func() bool {
		resp, err := http.Get(b.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, b.srv.child)

	b.do("reload the overview after the restart", chromedp.Reload(), chromedp.WaitVisible(css("main h1")))
	if got := b.text("main h1"); got == "Log in" || !b.eval(`document.querySelector(".counts") !== null`) {
		t.Fatalf("after the restart the reloaded overview shows %q, want the overview, still logged in", got)
	}
	if who := b.text(".who span"); who != "admin" {
		t.Errorf("after the restart the page shows %q as the user, want admin", who)
	}
	b.do("open the jobs page", chromedp.Navigate(b.base+"/jobs"), chromedp.WaitVisible(css("main h1")))
	if got := b.text("main h1"); got == "Log in" {
		t.Error("after the restart the jobs page asks to log in again")
	}
}
