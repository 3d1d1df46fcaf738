package app

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookledger/hookledger/modules/operations/simulate"
)

// TestEveryHandledTypeHasASample: each sample's type is handled by the
// module that keeps it, and every type a registered module handles has a
// sample trigger can send. The types tried are every sample's and every
// type of the official payload corpus (testdata/corpus), each provider's
// full list of documented events.
func TestEveryHandledTypeHasASample(t *testing.T) {
	t.Parallel()
	c, err := catalog()
	require.NoError(t, err)
	modules := handlingModules()
	for _, s := range c.Samples() {
		require.Contains(t, modules(s.Provider, s.Type), s.Module, "%s's sample of %s %s is a type it handles", s.Module, s.Provider, s.Type)
	}

	raw, err := os.ReadFile("../testdata/corpus/MANIFEST.json")
	require.NoError(t, err)
	var manifest struct {
		Files []struct {
			Provider   string `json:"provider"`
			HeaderType string `json:"header_type"`
			EventType  string `json:"event_type"`
		} `json:"files"`
	}
	require.NoError(t, json.Unmarshal(raw, &manifest))
	require.NotEmpty(t, manifest.Files)
	handling := map[string]bool{}
	for _, f := range manifest.Files {
		for _, typ := range []string{f.HeaderType, f.EventType} {
			mods := modules(f.Provider, typ)
			if typ == "" || len(mods) == 0 {
				continue
			}
			for _, m := range mods {
				handling[m] = true
			}
			s, ok := c.Lookup(typ)
			require.True(t, ok && s.Provider == f.Provider, "%s handle %s %s: a module keeps a sample of it", mods, f.Provider, typ)
		}
	}
	for m := range handling {
		require.Contains(t, moduleSamples, m, "module %s registers its samples in moduleSamples", m)
	}
	for m := range moduleSamples {
		require.True(t, slices.ContainsFunc(c.Samples(), func(s simulate.Sample) bool { return s.Module == m }), "module %s keeps samples", m)
	}
}
