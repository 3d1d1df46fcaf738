package entitlement

import (
	"embed"
	"io/fs"
)

//go:embed samples/*/*.json
var samples embed.FS

// Samples holds a realistic body of each event type the module handles,
// as PROVIDER/TYPE.json: trigger and simulate send them with fresh ids.
// samples/SOURCES.md names the official payload each is built from.
func Samples() fs.FS {
	sub, _ := fs.Sub(samples, "samples")
	return sub
}
