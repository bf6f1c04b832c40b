package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// What this binary is: the release, the commit it was built from and the
// Go version (sluice version, INFO server, the sluice_build_info metric).

// commit is set at build time with -ldflags "-X main.commit=..." (the
// Makefile sets it); without it the commit comes from the build
// information Go records when it builds inside a git checkout.
var commit = ""

// buildInfo describes the running binary.
type buildInfo struct {
	Version   string // main.version (a tag, git describe), else Go's module version, else "dev"
	Commit    string // full commit hash, "" when unknown
	Dirty     bool   // built from a tree with uncommitted changes
	GoVersion string // runtime.Version()
	Platform  string // GOOS/GOARCH
}

// currentBuild returns what -ldflags set, completed from Go's embedded
// build information (chooseBuild).
func currentBuild() buildInfo {
	bi, _ := debug.ReadBuildInfo()
	return chooseBuild(version, commit, bi, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

// chooseBuild describes a binary from what -ldflags set (ldVersion,
// ldCommit: "dev" and "" when unset) and Go's build information (bi, nil
// when the binary has none). The version: -ldflags's, else the module
// version Go recorded (a binary of "go install ...@v0.2.0" says v0.2.0; one
// built in a checkout, a pseudo-version naming the commit), else "dev".
// The commit: -ldflags's, else vcs.revision. Dirty: vcs.modified, or a
// version git describe --dirty or Go marked dirty.
func chooseBuild(ldVersion, ldCommit string, bi *debug.BuildInfo, goVersion, platform string) buildInfo {
	b := buildInfo{Version: ldVersion, Commit: ldCommit, GoVersion: goVersion, Platform: platform}
	if bi != nil {
		if v := bi.Main.Version; ldVersion == "dev" && v != "" && v != "(devel)" {
			b.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.modified":
				if ldCommit == "" {
					b.Dirty = s.Value == "true"
				}
			}
		}
	}
	// git describe --dirty marks a dirty tree in the version, Go with
	// "+dirty".
	if strings.HasSuffix(b.Version, "-dirty") || strings.HasSuffix(b.Version, "+dirty") {
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
