package app

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// readmeSection returns the text of a README section, up to the next one.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	raw, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(raw), "\n## "+heading+"\n")
	require.True(t, ok, "README has a %q section", heading)
	section, _, _ := strings.Cut(rest, "\n## ")
	return section
}

// TestReadmeCommandsMatchHelp: the README's command list shows each
// command's usage line and summary as --help prints them.
func TestReadmeCommandsMatchHelp(t *testing.T) {
	t.Parallel()
	section := readmeSection(t, "Commands")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" || sub.Hidden {
				continue
			}
			require.Contains(t, section, sub.UseLine()+"\n    "+sub.Short+"\n", "README lists %q", sub.CommandPath())
			walk(sub)
		}
	}
	walk(newRootCommand(terminal{}))
}

// TestReadmeLayoutListsEveryPackage: each folder holding a Go package
// (generated ent/ code aside) has its line in the README's layout.
func TestReadmeLayoutListsEveryPackage(t *testing.T) {
	t.Parallel()
	section := readmeSection(t, "Layout")
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			listed[strings.TrimSuffix(f[0], "/")] = true
		}
	}
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
		if dir != "." {
			require.True(t, listed[dir], "README's layout lists %s", dir)
		}
		return nil
	})
	require.NoError(t, err)
}
