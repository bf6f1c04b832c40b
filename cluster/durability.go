package cluster

import (
	"fmt"

	"github.com/sluice-rl/sluice/cluster/logstore"
	"github.com/sluice-rl/sluice/persistence"
)

// The log stores (Config.LogStore); cluster/logstore opens them and says
// what each costs.
const (
	LogStoreBolt = logstore.Bolt
	LogStoreWAL  = logstore.WAL
)

// The durability modes (Config.Fsync), named after Redis's appendfsync;
// cluster/logstore says what each risks.
const (
	FsyncAlways   = logstore.FsyncAlways
	FsyncEverysec = logstore.FsyncEverysec
	FsyncNo       = logstore.FsyncNo
)

// ResolveLogStore names the log store of a node on dataDir that asks for
// none: the one the data dir already holds (a data dir keeps the store it
// was created with, so a node restarted with default settings keeps its
// log, whichever store the default was when it was made), or
// DefaultLogStore for a new data dir.
func ResolveLogStore(dataDir string) (string, error) {
	has, err := persistence.StoredLogStore(dataDir)
	if err != nil {
		return "", fmt.Errorf("cluster: log store: %w", err)
	}
	if has != "" {
		return has, nil
	}
	return DefaultLogStore, nil
}
