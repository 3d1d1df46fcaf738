package app

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// docSection returns the text of a "## heading" section of the markdown
// file at path (relative to the repository root), up to the next one.
func docSection(t *testing.T, path, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", path))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(raw), "\n## "+heading+"\n")
	require.True(t, ok, "%s has a %q section", path, heading)
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// TestReadmeStartsAndLinks: the README stays a short page that starts a
// reader (the two set-up commands, a first event) and shows failures
// with their table and River UI's screenshot; the rest is in docs/.
func TestReadmeStartsAndLinks(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	readme := string(raw)
	require.LessOrEqual(t, len(raw), 12<<10, "README.md is at most 12 KiB; move detail into docs/")
	for _, s := range []string{"go tool task dev", "go tool task test", "go tool task trigger", "hookledger-dev",
		"(docs/modules.md)", "/riverui/", "/console/", "(docs/configuration.md)"} {
		require.Contains(t, readme, s)
	}
	failures := docSection(t, "README.md", "Failures and retries")
	require.Regexp(t, regexp.MustCompile(`(?m)^\|---\|`), failures, "Failures and retries has a table")
	require.Contains(t, failures, "](docs/riverui-retryable.png)")
}

// TestDocsCommandsMatchHelp: docs/cli.md lists each hookledger command's
// usage line and summary as --help prints them, and nothing else.
func TestDocsCommandsMatchHelp(t *testing.T) {
	t.Parallel()
	section := docSection(t, "docs/cli.md", "Commands")
	var want []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" || sub.Hidden {
				continue
			}
			require.Contains(t, section, sub.UseLine()+"\n    "+sub.Short+"\n", "docs/cli.md lists %q", sub.CommandPath())
			want = append(want, sub.UseLine())
			walk(sub)
		}
	}
	walk(newRootCommand(terminal{}))
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "hookledger ") {
			require.Contains(t, want, line, "docs/cli.md lists a command hookledger --help does not have")
		}
	}
}

// TestDocsLayoutListsEveryPackage: each folder holding a Go package
// (generated ent/ code aside) has its line in docs/ARCHITECTURE.md's
// layout, except feature modules: the layout lists their folder,
// modules/features/, and each module says what it owns in its own doc.go
// (the scaffold writes one), so that adding a module needs no edit here.
func TestDocsLayoutListsEveryPackage(t *testing.T) {
	t.Parallel()
	section := docSection(t, "docs/ARCHITECTURE.md", "Layout")
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed[strings.TrimSuffix(f[0], "/")] = true
		}
	}
	require.True(t, listed["modules/features"], "docs/ARCHITECTURE.md's layout lists the folder of feature modules")
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("..", path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || rel == "ent") {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		switch module, ok := strings.CutPrefix(dir, "modules/features/"); {
		case dir == ".":
		case ok && !strings.Contains(module, "/"):
			doc, err := os.ReadFile(filepath.Join("..", dir, "doc.go"))
			require.NoError(t, err, "feature module %s has a doc.go", dir)
			require.Contains(t, string(doc), "// Package "+module+" ", "%s/doc.go says what the module owns", dir)
		default:
			require.True(t, listed[dir], "docs/ARCHITECTURE.md's layout lists %s", dir)
		}
		return nil
	})
	require.NoError(t, err)
}
