package app_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/hookledger/hookledger/"

// corePackages are the packages under modules/ every feature may use.
var corePackages = map[string]bool{
	"ledger": true, "ledgertest": true, "provider": true, "receiver": true,
	"metrics": true, "web": true, "dbtest": true, "devdb": true,
	"shortcircuit": true, "redistest": true,
}

// TestModuleDependencies enforces the design: nothing imports app, a
// feature module imports no other feature module, and the core imports no
// feature module.
func TestModuleDependencies(t *testing.T) {
	entries, err := os.ReadDir("../modules")
	require.NoError(t, err)
	features := 0
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		if !corePackages[name] {
			features++
		}
		for _, imp := range imports(t, filepath.Join("../modules", name)) {
			rel, ok := strings.CutPrefix(imp, modulePath)
			if !ok {
				continue
			}
			require.False(t, rel == "app" || strings.HasPrefix(rel, "app/"), "modules/%s imports %s", name, imp)
			other, ok := strings.CutPrefix(rel, "modules/")
			if !ok {
				continue
			}
			other, _, _ = strings.Cut(other, "/")
			if other == name || corePackages[other] {
				continue
			}
			if corePackages[name] {
				t.Errorf("core package modules/%s imports feature module %s", name, imp)
			} else {
				t.Errorf("feature module modules/%s imports feature module %s", name, imp)
			}
		}
	}
	require.GreaterOrEqual(t, features, 4, "the feature modules were found")
	for _, dir := range []string{"../config", "../migrations", "../ent"} {
		for _, imp := range imports(t, dir) {
			require.False(t, strings.HasPrefix(imp, modulePath+"app"), "%s imports %s", dir, imp)
			if dir != "../migrations" {
				require.False(t, strings.HasPrefix(imp, modulePath+"modules"), "%s imports %s", dir, imp)
			}
		}
	}
}

// imports lists the imports of every Go file below dir, tests included.
func imports(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out = append(out, p)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}
