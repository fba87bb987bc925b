package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// AdminTokenFile is the name of the generated admin token in the data dir.
const AdminTokenFile = "admin-token"

// AdminTokenPath is where the generated admin token of dataDir lives.
func AdminTokenPath(dataDir string) string { return filepath.Join(dataDir, AdminTokenFile) }

// ReadAdminToken reads the generated admin token of dataDir (for the CLI).
func ReadAdminToken(dataDir string) (string, error) {
	p := AdminTokenPath(dataDir)
	raw, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("api: no admin token at %s: start `agentwork serve` once with this data dir, or set http.admin_token: %w", p, err)
	}
	if err != nil {
		return "", fmt.Errorf("api: read admin token: %w", err)
	}
	tok := strings.TrimSpace(string(raw))
	if len(tok) < 16 {
		return "", fmt.Errorf("api: admin token in %s is too short (%d characters); delete the file to have a new one generated", p, len(tok))
	}
	return tok, nil
}

// EnsureAdminToken returns the admin token of dataDir, generating it (256
// random bits, hex, file mode 0600) when there is none. Two processes
// racing get the same token: the file is created exclusively.
func EnsureAdminToken(dataDir string) (string, error) {
	if tok, err := ReadAdminToken(dataDir); err == nil {
		return tok, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("api: create data dir for the admin token: %w", err)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("api: generate admin token: %w", err)
	}
	tok := hex.EncodeToString(b[:])
	// Written to a temporary file, then linked into place: a reader never
	// sees a half-written token, and an existing one is never replaced.
	tmp, err := os.CreateTemp(dataDir, ".admin-token-*")
	if err != nil {
		return "", fmt.Errorf("api: write admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(tok + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), AdminTokenPath(dataDir))
	}
	if errors.Is(err, fs.ErrExist) {
		return ReadAdminToken(dataDir) // another process was first
	}
	if err != nil {
		return "", fmt.Errorf("api: write admin token: %w", err)
	}
	return tok, nil
}
