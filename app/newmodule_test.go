//go:build unix

package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"go/format"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

// TestNewModuleRegistersAfterTheLastModule: the registration goes after
// the last statement of a function body that registers a feature module,
// a statement of several lines included, and not into a block of its own;
// the import joins the feature modules'.
func TestNewModuleRegistersAfterTheLastModule(t *testing.T) {
	t.Parallel()
	src := `package app

import (
	"net/http"

	"github.com/hookledger/hookledger/modules/core/ledger"
	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/features/thin"
)

func (a *App) registerModules() {
	payment.Register(a.registry)
	thin.Register(a.registry, thin.Config{
		HTTP: &http.Client{}})
	if a.cfg.Reconcile {
		payment.Register(a.registry)
	}
	ledger.Register(a.registry)
}
`
	out, err := registerIn([]byte(src), "invoice")
	require.NoError(t, err)
	require.Contains(t, string(out), `
	"github.com/hookledger/hookledger/modules/features/invoice"
	"github.com/hookledger/hookledger/modules/features/payment"
`)
	require.Contains(t, string(out), `
	thin.Register(a.registry, thin.Config{
		HTTP: &http.Client{}})
	invoice.Register(a.registry)
	if a.cfg.Reconcile {
`)

	_, err = registerIn([]byte("package app\n\nfunc f() {}\n"), "invoice")
	require.ErrorContains(t, err, "found no feature module's registration")
	_, err = registerIn([]byte(src), "payment")
	require.ErrorIs(t, err, errUsage)
}

// TestNewModuleListsItsSamples: the module's samples join moduleSamples
// as its last entry, and the import the feature modules'.
func TestNewModuleListsItsSamples(t *testing.T) {
	t.Parallel()
	src := `package app

import (
	"io/fs"

	"github.com/hookledger/hookledger/modules/features/payment"
	"github.com/hookledger/hookledger/modules/operations/simulate"
)

var moduleSamples = map[string]func() fs.FS{
	"payment": payment.Samples,
}

var _ = simulate.NewCatalog
`
	out, err := samplesIn([]byte(src), "invoice")
	require.NoError(t, err)
	require.Contains(t, string(out), `
	"github.com/hookledger/hookledger/modules/features/invoice"
	"github.com/hookledger/hookledger/modules/features/payment"
`)
	require.Contains(t, string(out), `
	"payment": payment.Samples,
	"invoice": invoice.Samples,
}`)
	_, err = samplesIn([]byte("package app\n\nimport \"github.com/hookledger/hookledger/modules/features/payment\"\n\nvar _ = payment.Register\n"), "invoice")
	require.ErrorContains(t, err, "found no list of the modules' samples")
}

// TestNewModuleGuideShowsTheScaffold: the module guide's walk-through
// shows the files hookledger-dev new module dunning writes, as it writes
// them.
func TestNewModuleGuideShowsTheScaffold(t *testing.T) {
	t.Parallel()
	guide, err := os.ReadFile("../docs/modules.md")
	require.NoError(t, err)
	s := scaffold{Name: "dunning", Table: "dunning", Type: "Dunning", EventType: "dunning.updated"}
	for _, tmpl := range []string{"doc.go.tmpl", "module.go.tmpl", "module_test.go.tmpl", "schema.go.tmpl", "samples.go.tmpl"} {
		text, err := renderScaffold(tmpl, s)
		require.NoError(t, err)
		require.Contains(t, string(guide), "```go\n"+string(text)+"```\n", "docs/modules.md shows %s as the command writes it", tmpl)
	}
	require.Contains(t, string(guide), "## 1. Start with `hookledger-dev new module dunning`")
	require.Contains(t, string(guide), "\ngo run ./app/cmd/hookledger-dev new module dunning ")
}

// TestNewModuleScaffoldsAWorkingModule runs hookledger new module in a
// copy of the repository, then the generate task's two steps: ent's code
// and the module's migration; the module, its test and its registration
// compile against the checkout. Refused names write nothing. That the
// module passes its tests and those of the whole suite is
// `go tool task test:scaffold`'s to prove, in a clean clone: built in the
// copy, whose every package compiles anew (its paths are not the
// checkout's), it cost `task test` minutes of compiling on two cores.
func TestNewModuleScaffoldsAWorkingModule(t *testing.T) {
	if testing.Short() {
		t.Skip("generates code in a copy of the repository")
	}
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command")
	// The copy's tests use this run's server, never a cluster of their own.
	admin := dbtest.Admin(t)
	repo := copyCheckout(t, "..")
	newModule := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		ctx := context.WithValue(context.Background(), workingDirKey{}, repo)
		code := MainWith(ctx, "hookledger-dev", append([]string{"new"}, args...), &stdout, &stderr, NewModuleCommand())
		return code, stdout.String(), stderr.String()
	}

	before := treeDigest(t, repo)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"module"}, "takes a module name"},
		{[]string{"module", "a", "b"}, "takes a module name"},
		{[]string{"module", "Invoice"}, "lowercase Go identifier"},
		{[]string{"module", "2fa"}, "lowercase Go identifier"},
		{[]string{"module", "refund_request"}, "lowercase Go identifier"},
		{[]string{"module", "order"}, "reserved word of PostgreSQL"},
		{[]string{"module", "func"}, "Go keyword"},
		{[]string{"module", "client"}, "ent's generated code"},
		{[]string{"module", "usage"}, "modules/features/usage already exists"},
		{[]string{"module", "webhookevent"}, "ent/webhookevent already exists"},
		{[]string{"module", "config"}, "ent's generated code"},
		{[]string{"module", "serve"}, "package app already uses the name serve"},
		{[]string{"modul", "x"}, `unknown command "modul"`},
	} {
		code, stdout, stderr := newModule(c.args...)
		require.Equal(t, ExitUsage, code, "%v: %s", c.args, stderr)
		require.Contains(t, stderr, c.says, "%v", c.args)
		require.Empty(t, stdout, "%v", c.args)
		require.Equal(t, before, treeDigest(t, repo), "%v wrote nothing", c.args)
	}

	code, stdout, stderr := newModule("module", "widget")
	require.Equal(t, ExitOK, code, stderr)
	for _, line := range []string{
		"wrote modules/features/widget/doc.go", "wrote modules/features/widget/widget.go",
		"wrote modules/features/widget/widget_test.go", "wrote modules/features/widget/samples.go",
		"wrote modules/features/widget/samples/stripe/widget.updated.json", "wrote ent/schema/widget.go",
		"registered widget in app/app.go and its samples in app/trigger.go", "go tool task generate -- widget",
		"go test ./modules/features/widget ./app", "go tool task trigger -- widget.updated",
	} {
		require.Contains(t, stdout, line+"\n")
	}
	appGo, err := os.ReadFile(filepath.Join(repo, "app", "app.go"))
	require.NoError(t, err)
	require.Contains(t, string(appGo), "\n\t\"github.com/hookledger/hookledger/modules/features/widget\"\n")
	require.Contains(t, string(appGo), "\n\twidget.Register(a.registry)\n")
	triggerGo, err := os.ReadFile(filepath.Join(repo, "app", "trigger.go"))
	require.NoError(t, err)
	require.Contains(t, string(triggerGo), "\n\t\"github.com/hookledger/hookledger/modules/features/widget\"\n")
	require.Regexp(t, `\n\t"widget": +widget\.Samples,\n`, string(triggerGo))

	generated := treeDigest(t, repo)
	code, _, stderr = newModule("module", "widget")
	require.Equal(t, ExitUsage, code, stderr)
	require.Contains(t, stderr, "modules/features/widget already exists")
	require.Equal(t, generated, treeDigest(t, repo), "a second run writes nothing")

	env := append(os.Environ(), "TEST_DATABASE_URL="+admin, "GOWORK=off")
	// Each command runs in a process group of its own, killed whole when
	// the test's deadline nears, so that no compiler outlives the test.
	ctx := context.Background()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-15*time.Second))
		defer cancel()
	}
	goIn := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir, cmd.Env = dir, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}
	goIn(repo, "generate", "./ent")
	goIn(repo, "run", "./migrations/gen", "-name", "widget")
	ups, err := filepath.Glob(filepath.Join(repo, "migrations", "*_widget.up.sql"))
	require.NoError(t, err)
	require.Len(t, ups, 1, "one migration pair")
	up, err := os.ReadFile(ups[0])
	require.NoError(t, err)
	require.Contains(t, string(up), `CREATE TABLE "widget"`)
	require.Contains(t, string(up), `("namespace", "external_id")`)
	for _, f := range []string{"modules/features/widget/widget.go", "modules/features/widget/widget_test.go",
		"modules/features/widget/doc.go", "modules/features/widget/samples.go", "ent/schema/widget.go", "ent/widget.go"} {
		src, err := os.ReadFile(filepath.Join(repo, f))
		require.NoError(t, err)
		formatted, err := format.Source(src)
		require.NoError(t, err, "%s parses", f)
		require.Equal(t, string(formatted), string(src), "%s is gofmt'ed", f)
	}

	// The module and its registration compile against this checkout's
	// core: built here, not in the copy, with the copy's new and changed
	// files laid over the checkout's (go build -overlay), so only the
	// module and app compile anew.
	checkout, err := filepath.Abs("..")
	require.NoError(t, err)
	overlay := map[string]string{}
	for _, f := range []string{"app/app.go", "app/trigger.go"} {
		overlay[filepath.Join(checkout, f)] = filepath.Join(repo, f)
	}
	require.NoError(t, filepath.WalkDir(filepath.Join(repo, "modules", "features", "widget"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			overlay[filepath.Join(checkout, strings.TrimPrefix(path, repo))] = path
		}
		return err
	}))
	overlayFile := filepath.Join(t.TempDir(), "overlay.json")
	raw, err := json.Marshal(map[string]any{"Replace": overlay})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(overlayFile, raw, 0o644))
	built := t.TempDir()
	goIn(checkout, "build", "-overlay", overlayFile, "./app", "./modules/features/widget")
	goIn(checkout, "test", "-c", "-vet=off", "-o", filepath.Join(built, "widget.test"), "-overlay", overlayFile, "./modules/features/widget")
}

// TestNewModuleOutsideACheckout: run where no go.mod of hookledger's is
// found, the command says so and writes nothing.
func TestNewModuleOutsideACheckout(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/other\n"), 0o644))
	t.Chdir(dir)
	var stdout, stderr bytes.Buffer
	code := MainWith(context.Background(), "hookledger-dev", []string{"new", "module", "invoice"}, &stdout, &stderr, NewModuleCommand())
	require.Equal(t, ExitFailure, code)
	require.Contains(t, stderr.String(), `is module "example.com/other", not github.com/hookledger/hookledger`)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing beside go.mod")
}

// copyCheckout copies the source files of the checkout at root into a
// temporary folder: no .git, build output, local database or caches.
func copyCheckout(t *testing.T, root string) string {
	t.Helper()
	dst := t.TempDir()
	skip := map[string]bool{".git": true, "bin": true, ".pgdata": true, ".pgdata.lock": true, ".task": true,
		"testdata/fuzz-cache": true}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if skip[filepath.ToSlash(rel)] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case !d.Type().IsRegular(), strings.HasSuffix(rel, ".test"), strings.HasSuffix(rel, ".out"):
			return nil
		}
		return copyFile(path, target)
	})
	require.NoError(t, err)
	return dst
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// treeDigest is every file below root with its content's hash.
func treeDigest(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out = append(out, fmt.Sprintf("%s %x", filepath.ToSlash(rel), sha256.Sum256(raw)))
		return nil
	})
	require.NoError(t, err)
	sort.Strings(out)
	return out
}
