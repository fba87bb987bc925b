package main

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/agentwork/agentwork"

// layers are the module's layers, lowest first: a package may import its
// own layer and those below, never one above (cmd → config → triggers →
// api/console/mcpserver → workflow → agentwork → approval → connectors/tools/model → bus). internal/ is plumbing
// any layer may use.
var layers = [][]string{
	{"bus"},
	{"connectors", "tools", "model"},
	{"approval"},
	{"agentwork"},
	{"workflow"},
	{"api", "console", "mcpserver"},
	{"triggers"},
	{"config"},
	{"cmd"},
}

// layerOf is the layer of an import path of the module (-1: internal or
// not layered, e.g. bench and e2e, which hold only tests).
func layerOf(path string) int {
	rel := strings.TrimPrefix(path, module+"/")
	top, _, _ := strings.Cut(rel, "/")
	for i, l := range layers {
		for _, name := range l {
			if top == name {
				return i
			}
		}
	}
	return -1
}

// No package imports one of a layer above its own: in particular api,
// which serves the triggers' routes, imports no trigger.
func TestLayering(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(dir string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if name := d.Name(); dir != root && (strings.HasPrefix(name, ".") || name == "testdata") {
			return filepath.SkipDir
		}
		pkg, err := build.Default.ImportDir(dir, 0)
		if err != nil {
			if _, ok := err.(*build.NoGoError); ok {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, dir)
		path := module + "/" + filepath.ToSlash(rel)
		own := layerOf(path)
		if own < 0 {
			return nil
		}
		checked++
		for _, imp := range pkg.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if l := layerOf(imp); l > own {
				t.Errorf("%s (layer %v) imports %s (layer %v, above it)", path, layers[own], imp, layers[l])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("checked %d packages; the walk missed the module", checked)
	}
	if _, err := os.Stat(filepath.Join(root, "api", "server.go")); err != nil {
		t.Fatalf("module root %s has no api/server.go: %v", root, err)
	}
}
