package main

import (
	"log/slog"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// The links between nodes are internal/testkit's LinkProxy (its doc
// describes the partitions and the drop, stall and reject modes); these
// names keep the nemesis's vocabulary.
type (
	linkProxy = testkit.LinkProxy
	cutMode   = testkit.LinkMode
)

const (
	linkUp    = testkit.LinkUp
	cutDrop   = testkit.LinkDrop
	cutReject = testkit.LinkReject
	cutStall  = testkit.LinkStall
)

// newLinkProxy listens on a free port of 127.0.0.1 for connections to
// forward to target.
func newLinkProxy(target string, log *slog.Logger) (*linkProxy, error) {
	return testkit.NewLinkProxy(target, log)
}
