package app

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is what this build says about itself.
type Version struct {
	// Module is the main module's version: a tag for `go install
	// module@version`, "(devel)" for a build from a checkout.
	Module string
	// Revision is the VCS commit the binary was built from, "unknown" when
	// the build recorded none (go run, tests); Modified marks a dirty tree.
	Revision  string
	Modified  bool
	GoVersion string
}

// buildVersion reads the version the Go toolchain stamped into the binary.
func buildVersion() Version {
	v := Version{Module: "(devel)", Revision: "unknown", GoVersion: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Version != "" {
		v.Module = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v Version) String() string {
	rev := v.Revision
	if v.Modified {
		rev += " (modified)"
	}
	return fmt.Sprintf("hookledger %s, revision %s, %s", v.Module, rev, v.GoVersion)
}
