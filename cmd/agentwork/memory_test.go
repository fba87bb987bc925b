package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api/problem"
	"github.com/agentwork/agentwork/tools/memory"
)

// writeEditor writes an $EDITOR script: sh that runs body with the file
// to edit as $1.
func writeEditor(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMemoryCommands: a person reads and edits the agent's memory as
// Markdown with the CLI and over HTTP; an edit that lost a race to
// another writer is not saved and keeps its text in a file it names; the
// memory survives a restart; export and import round-trip it.
func TestMemoryCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the server twice")
	}
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	httpAddr := freeAddr(t)
	cfg := writeConfig(t, dir, strings.Replace(testConfig, `listen: "off"`, "listen: "+httpAddr, 1))
	_, stop := startServe(t, cfg, dataDir)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cli := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, append(args, "--data-dir", dataDir), &out, &errOut)
		return out.String() + errOut.String(), err
	}

	if out, err := cli("memory", "show"); err != nil || !strings.Contains(out, "the memory is empty") {
		t.Fatalf("memory show on a new runtime = %v:\n%s", err, out)
	}
	t.Setenv("VISUAL", "")
	// A person takes longer over the edit than --timeout gives the bus calls.
	t.Setenv("EDITOR", writeEditor(t, dir, "add-people", `sleep 2; printf '## People\n\n- Ana runs ops.\n' >> "$1"`))
	if out, err := cli("memory", "edit", "long", "--timeout", "1s"); err != nil || !strings.Contains(out, "MEMORY.md: saved (revision") {
		t.Fatalf("memory edit long = %v:\n%s", err, out)
	}
	if out, err := cli("memory", "show", "long"); err != nil || out != "## People\n\n- Ana runs ops.\n" {
		t.Fatalf("memory show long = %v:\n%q", err, out)
	}

	// An edit while another writer changes the document: not saved, the
	// edited text kept in a file the error names. The other writer is an
	// import the editor runs (this test binary as agentwork).
	other := filepath.Join(dir, "other")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "MEMORY.md"), []byte("## People\n\n- Bo runs ops now.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDITOR", writeEditor(t, dir, "race", fmt.Sprintf(
		`%s=1 %s_ARGS="memory import %s --data-dir %s" %s -test.run='^$' >/dev/null 2>&1 || exit 1
printf -- '- Cy joined.\n' >> "$1"`, childEnv, childEnv, other, dataDir, os.Args[0])))
	out, err := cli("memory", "edit", "long")
	if !errors.Is(err, memory.ErrConflict) || !strings.Contains(err.Error(), "your text is kept in ") {
		t.Fatalf("memory edit racing an import = %v:\n%s\nwant a conflict naming the file with the text", err, out)
	}
	kept := strings.TrimSpace(err.Error()[strings.Index(err.Error(), "kept in ")+len("kept in "):])
	kept = strings.Fields(kept)[0]
	if b, rerr := os.ReadFile(kept); rerr != nil || !strings.Contains(string(b), "- Cy joined.") {
		t.Errorf("the kept file %s = %q, %v; want the edited text", kept, b, rerr)
	}
	os.Remove(kept)
	if out, _ := cli("memory", "show", "long"); !strings.Contains(out, "Bo runs ops now") || strings.Contains(out, "Cy joined") {
		t.Errorf("after the lost edit, long = %q, want the import's text only", out)
	}
	if out, err := cli("memory", "show", "long", "--history"); err != nil || !strings.Contains(out, "by agentwork memory import") || !strings.Contains(out, "by agentwork memory edit") {
		t.Errorf("memory show long --history = %v:\n%s\nwant both revisions and who wrote them", err, out)
	}

	// HTTP: read with the revision as ETag, a stale If-Match is a 412.
	token, err := os.ReadFile(filepath.Join(dataDir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, body string, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+httpAddr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := do("GET", "/v1/memory/long", "", "Accept", "text/markdown")
	etag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || body != "## People\n\n- Bo runs ops now.\n" || etag == "" {
		t.Fatalf("GET /v1/memory/long = %d %q (ETag %s)", resp.StatusCode, body, etag)
	}
	if resp, body := do("PUT", "/v1/memory/long", "## People\n\n- Bo, and Dee on call.\n", "If-Match", etag); resp.StatusCode != 200 {
		t.Fatalf("PUT /v1/memory/long at its revision = %d %s", resp.StatusCode, body)
	}
	resp, body = do("PUT", "/v1/memory/long", "stale\n", "If-Match", etag)
	var p problem.Details
	if resp.StatusCode != http.StatusPreconditionFailed || json.Unmarshal([]byte(body), &p) != nil || p.Code != "conflict" {
		t.Errorf("PUT at a stale revision = %d %s, want a 412 conflict problem", resp.StatusCode, body)
	}
	if resp, body := do("GET", "/v1/memory", ""); resp.StatusCode != 200 || !strings.Contains(body, `"name":"long"`) {
		t.Errorf("GET /v1/memory = %d %s", resp.StatusCode, body)
	}
	if resp, _ := do("GET", "/v1/memory/notes", ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("GET /v1/memory/notes = %d, want 400", resp.StatusCode)
	}

	// The memory survives a restart.
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, stop = startServe(t, cfg, dataDir)
	if out, err := cli("memory", "show", "long"); err != nil || out != "## People\n\n- Bo, and Dee on call.\n" {
		t.Fatalf("memory show long after a restart = %v:\n%q", err, out)
	}

	// A kept revision written back: the import's, which the ETag named.
	rev := strings.Trim(etag, `"`)
	if out, err := cli("memory", "restore", "long", "--revision", rev); err != nil || !strings.Contains(out, "revision "+rev+" restored as revision") {
		t.Fatalf("memory restore long --revision %s = %v:\n%s", rev, err, out)
	}
	if out, _ := cli("memory", "show", "long"); out != "## People\n\n- Bo runs ops now.\n" {
		t.Errorf("after the restore, long = %q, want the import's text", out)
	}
	if _, err := cli("memory", "restore", "long", "--revision", "999"); err == nil || !strings.Contains(err.Error(), "no kept revision 999") {
		t.Errorf("memory restore of a revision not kept = %v, want an error listing the kept ones", err)
	}

	// Export and import round-trip it, daily logs included.
	today := time.Now().UTC().Format("2006-01-02")
	if resp, body := do("PUT", "/v1/memory/today", "# "+today+"\n\nA day.\n", "If-None-Match", "*"); resp.StatusCode != 200 {
		t.Fatalf("PUT /v1/memory/today = %d %s", resp.StatusCode, body)
	}
	backup := filepath.Join(dir, "backup")
	if out, err := cli("memory", "export", backup); err != nil || !strings.Contains(out, "exported 2 document(s)") {
		t.Fatalf("memory export = %v:\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(backup, "memory", today+".md")); err != nil || !strings.Contains(string(b), "A day.") {
		t.Errorf("the exported log = %q, %v", b, err)
	}
	if out, err := cli("memory", "import", backup); err != nil || !strings.Contains(out, "imported 2 of 2") {
		t.Errorf("memory import = %v:\n%s", err, out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
