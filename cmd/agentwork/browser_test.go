package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/agentwork/agentwork/api"
)

// chromium finds Debian's chromium on PATH ("" when it is not there).
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// screenshots is where the browser suite keeps its screenshots: the
// AGENTWORK_ARTIFACTS directory, else .artifacts/console at the module's
// root (ignored by git). They are kept after the test.
func screenshots(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AGENTWORK_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join("..", "..", ".artifacts", "console")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	t.Logf("screenshots in %s", abs)
	return dir
}

// browser is one console test: the real binary serving config, and
// Debian's chromium driven by chromedp at 1280×900. Each browser test
// starts its own; see startBrowser.
type browser struct {
	t     *testing.T
	srv   *crashServer
	base  string // http://host:port of the server's HTTP listener
	admin string // the admin token
	ctx   context.Context
	shots string
}

// startBrowser skips the test when chromium is missing (naming the
// package to install), else starts the binary with config (its
// `http.listen` is set here: leave it out) and a browser, both stopped
// when the test ends.
func startBrowser(t *testing.T, config string) *browser {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a server and a browser")
	}
	chrome := chromium()
	if chrome == "" {
		t.Skip("console browser suite skipped: no chromium on PATH; install it: apt-get install chromium")
	}
	addr := freeAddr(t)
	srv := startCrashServer(t, config+"\nhttp:\n  listen: "+addr+"\n")
	b := &browser{t: t, srv: srv, base: "http://" + addr}
	waitFor(t, 30*time.Second, "a ready HTTP server", func() bool {
		resp, err := http.Get(b.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, srv.child)
	admin, err := api.ReadAdminToken(srv.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	b.admin = admin
	b.shots = screenshots(t)

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	t.Cleanup(cancel)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 900), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	b.ctx = bctx
	return b
}

// do runs steps in the browser, failing the test with what was being
// done and the server's stderr.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v\nserver stderr:\n%s", what, err, b.srv.stderr.String())
	}
}

// text is the trimmed text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("the text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// eval evaluates a JavaScript expression that answers true or false.
func (b *browser) eval(js string) bool {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](js))
	if err != nil {
		b.t.Fatalf("%s: %v", js, err)
	}
	return v
}

// shot saves a screenshot of the whole page as <name>.png among the
// suite's artifacts.
func (b *browser) shot(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		buf, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(b.shots, name+".png"), buf, 0o644)
	})
}

// login logs in with the admin token from the login page and waits for
// the overview.
func (b *browser) login() {
	b.t.Helper()
	b.do("log in", chromedp.Navigate(b.base+"/"), chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), b.admin), chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css(".counts")))
}

// cookies are the browser's cookies for the server.
func (b *browser) cookies() []*network.Cookie {
	b.t.Helper()
	got, err := chromedp.Run(b.ctx, chromedp.Action[network.GetCookiesResult](func(ctx context.Context, tg *chromedp.Target) (network.GetCookiesResult, error) {
		return cdp.Call(ctx, tg, network.GetCookies, network.GetCookiesParams{URLs: []string{b.base}})
	}))
	if err != nil {
		b.t.Fatal(err)
	}
	return got.Cookies
}

// waitUntil waits, without reloading, until the JavaScript expression js
// is true: it is evaluated again at every change of the page's DOM (a
// live row added, a text set), failing after d.
func (b *browser) waitUntil(d time.Duration, what, js string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](js, chromedp.WithPollingMutation(), chromedp.WithPollingTimeout(d))); err != nil {
		b.t.Fatalf("no %s after %s: %v\nserver stderr:\n%s", what, d, err, b.srv.stderr.String())
	}
}

// css selects by a CSS selector.
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }
