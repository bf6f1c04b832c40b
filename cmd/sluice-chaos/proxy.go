package main

import "github.com/sluice-rl/sluice/internal/testkit"

// The links between nodes are internal/testkit's LinkProxy (its doc
// describes the partitions and the drop, stall and reject modes); these
// names keep the nemesis's vocabulary.
type cutMode = testkit.LinkMode

const (
	cutDrop   = testkit.LinkDrop
	cutReject = testkit.LinkReject
)
