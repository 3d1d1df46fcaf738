package app_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the hookledger binary the fault tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
