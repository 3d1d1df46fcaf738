package app_test

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const modulePath = "github.com/hookledger/hookledger/"

// The layout inside modules/ is the architecture: a package's folder says
// what it is, and this test derives the dependency rules from it.
//
//   - core: the ledger and its claim/apply path, the provider verifiers,
//     the receiver, metrics: what every feature uses. Imports core only.
//   - features: the business modules (subscription, payment, usage...).
//     Import the core, never each other.
//   - operations: what operators run beside the webhooks (admin API,
//     console, replay, simulate), shipped in the hookledger binary. Import
//     the core only, never each other, a feature or test support.
//   - testsupport: databases, harnesses, servers and the bench, for tests
//     and local development (hookledger-dev), never linked into hookledger.
//     Imports the core and itself.
//
// Tests of any package may also import test support. Nothing imports app
// but the main packages under app/cmd.
var allowed = map[string][]string{
	"core":        {"core"},
	"features":    {"core"},
	"operations":  {"core"},
	"testsupport": {"core", "testsupport"},
}

// siblingsAllowed are the categories whose packages may import one another.
var siblingsAllowed = map[string]bool{"core": true, "testsupport": true}

// TestModuleDependencies enforces the design card: nothing imports app, a
// feature module imports no other feature module, and the core imports no
// feature module; it reads the rules from the folders.
func TestModuleDependencies(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir("../modules")
	require.NoError(t, err)
	var categories []string
	packages := map[string]int{}
	for _, e := range entries {
		if !e.IsDir() {
			if strings.HasSuffix(e.Name(), ".go") {
				t.Errorf("modules/%s: Go files belong in a category folder", e.Name())
			}
			continue
		}
		cat := e.Name()
		if _, ok := allowed[cat]; !ok {
			t.Errorf("modules/%s: not a category (want one of core, features, operations, testsupport)", cat)
			continue
		}
		categories = append(categories, cat)
		pkgs, err := os.ReadDir(filepath.Join("../modules", cat))
		require.NoError(t, err)
		for _, p := range pkgs {
			if !p.IsDir() {
				t.Errorf("modules/%s/%s: a category folder holds packages only", cat, p.Name())
				continue
			}
			packages[cat]++
			checkImports(t, cat, p.Name())
		}
	}
	require.ElementsMatch(t, []string{"core", "features", "operations", "testsupport"}, categories)
	require.GreaterOrEqual(t, packages["features"], 4, "the feature modules were found")
	require.GreaterOrEqual(t, packages["core"], 3, "the core packages were found")

	for _, dir := range []string{"../config", "../migrations", "../ent"} {
		for _, imp := range append(imports(t, dir, false), imports(t, dir, true)...) {
			require.False(t, strings.HasPrefix(imp, modulePath+"app"), "%s imports %s", dir, imp)
			if dir != "../migrations" {
				require.False(t, strings.HasPrefix(imp, modulePath+"modules"), "%s imports %s", dir, imp)
			}
		}
	}
}

// TestOnlyCommandsImportApp: app is the composition root, and only the
// main packages under app/cmd import it.
func TestOnlyCommandsImportApp(t *testing.T) {
	t.Parallel()
	err := filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(path, filepath.Join("..", "app", "cmd")+string(filepath.Separator)) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == modulePath+"app" {
				t.Errorf("%s imports %s: only the main packages under app/cmd do", path, p)
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// TestProductionBinaryLinksNoDevTooling: hookledger links neither test
// support (throwaway clusters, harnesses) nor the bench; hookledger-dev,
// the binary of the development tools, does.
func TestProductionBinaryLinksNoDevTooling(t *testing.T) {
	t.Parallel()
	deps := func(cmd string) []string {
		out, err := exec.Command("go", "list", "-deps", cmd).Output()
		require.NoError(t, err, "go list -deps %s", cmd)
		return strings.Fields(string(out))
	}
	const testsupport, bench = modulePath + "modules/testsupport/", modulePath + "modules/testsupport/bench"
	prod := deps("./cmd/hookledger")
	require.Contains(t, prod, modulePath+"modules/core/ledger", "the listing holds hookledger's own packages")
	for _, p := range prod {
		if strings.HasPrefix(p, testsupport) || strings.HasPrefix(p, modulePath) && strings.HasSuffix(p, "/bench") {
			t.Errorf("hookledger links %s", p)
		}
	}
	dev := deps("./cmd/hookledger-dev")
	require.Contains(t, dev, bench)
	require.Contains(t, dev, testsupport+"devdb")
}

// checkImports applies the rules to modules/cat/name.
func checkImports(t *testing.T, cat, name string) {
	t.Helper()
	dir := filepath.Join("../modules", cat, name)
	self := "modules/" + cat + "/" + name
	for _, withTests := range []bool{false, true} {
		for _, imp := range imports(t, dir, withTests) {
			rel, ok := strings.CutPrefix(imp, modulePath)
			if !ok {
				continue
			}
			if rel == "app" || strings.HasPrefix(rel, "app/") {
				t.Errorf("%s imports %s", self, imp)
				continue
			}
			mod, ok := strings.CutPrefix(rel, "modules/")
			if !ok {
				continue
			}
			parts := strings.SplitN(mod, "/", 3)
			if len(parts) < 2 {
				t.Errorf("%s imports %s, outside the category folders", self, imp)
				continue
			}
			otherCat, other := parts[0], parts[1]
			if otherCat == cat && other == name {
				continue
			}
			ok = slices.Contains(allowed[cat], otherCat) && (otherCat != cat || siblingsAllowed[cat])
			if withTests && otherCat == "testsupport" {
				ok = true
			}
			if !ok {
				t.Errorf("%s (%s) imports %s (%s)", self, cat, imp, otherCat)
			}
		}
	}
}

// imports lists the imports of the Go files below dir: without tests, or
// of the test files only.
func imports(t *testing.T, dir string, tests bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") != tests {
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
