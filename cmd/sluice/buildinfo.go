package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// What this binary is: the release, the commit it was built from and the
// Go version (sluice version, INFO server, the sluice_build_info metric).

// commit is set at build time with -ldflags "-X main.commit=..." (the
// Makefile sets it); without it the commit comes from the build
// information Go records when it builds inside a git checkout.
var commit = ""

// buildInfo describes the running binary.
type buildInfo struct {
	Version   string // main.version: a tag, git describe, or "dev"
	Commit    string // full commit hash, "" when unknown
	Dirty     bool   // built from a tree with uncommitted changes
	GoVersion string // runtime.Version()
	Platform  string // GOOS/GOARCH
}

// currentBuild returns what -ldflags set, completed from Go's embedded
// build information (vcs.revision, vcs.modified).
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.modified":
				if commit == "" {
					b.Dirty = s.Value == "true"
				}
			}
		}
	}
	// git describe --dirty marks a dirty tree in the version.
	if len(b.Version) > 6 && b.Version[len(b.Version)-6:] == "-dirty" {
		b.Dirty = true
	}
	return b
}

// gitSHA1 is the commit as INFO reports it: Redis prints 00000000 when
// the build knows none.
func (b buildInfo) gitSHA1() string {
	if b.Commit == "" {
		return "00000000"
	}
	return b.Commit
}

// String is the line sluice version prints.
func (b buildInfo) String() string {
	c := b.Commit
	if c == "" {
		c = "unknown"
	}
	if b.Dirty {
		c += " (dirty)"
	}
	return fmt.Sprintf("sluice %s\ncommit %s\n%s %s\n", b.Version, c, b.GoVersion, b.Platform)
}
