package persistence

import (
	"fmt"
	"os"
	"path/filepath"
)

// DataDir is the layout of one node's data directory:
//
//	<root>/raft.db       Raft's log and stable store (bolt), fsynced per write
//	<root>/snapshots/    Raft's file snapshot store, one directory per snapshot
//
// The root and snapshots/ are created 0700 (raft.db is 0600), so whatever
// modes Raft gives the files below, only the owner can read the state.
type DataDir struct {
	root string
}

// OpenDataDir creates root and its subdirectories if they are missing and
// returns the layout. An existing directory is used as it is.
func OpenDataDir(root string) (DataDir, error) {
	if root == "" {
		return DataDir{}, fmt.Errorf("persistence: data dir: empty path")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return DataDir{}, fmt.Errorf("persistence: data dir %q: %w", root, err)
	}
	d := DataDir{root: abs}
	for _, dir := range []string{d.root, d.SnapshotDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return DataDir{}, fmt.Errorf("persistence: create data dir: %w", err)
		}
	}
	fi, err := os.Stat(d.root)
	if err != nil {
		return DataDir{}, fmt.Errorf("persistence: data dir: %w", err)
	}
	if !fi.IsDir() {
		return DataDir{}, fmt.Errorf("persistence: data dir %q is not a directory", d.root)
	}
	return d, nil
}

// Root is the directory's absolute path.
func (d DataDir) Root() string { return d.root }

// RaftDB is the path of the bolt file that holds Raft's log and stable
// state.
func (d DataDir) RaftDB() string { return filepath.Join(d.root, "raft.db") }

// SnapshotBase is the directory to hand to raft.NewFileSnapshotStore, which
// keeps its snapshots in SnapshotDir below it.
func (d DataDir) SnapshotBase() string { return d.root }

// SnapshotDir is where the snapshots are.
func (d DataDir) SnapshotDir() string { return filepath.Join(d.root, "snapshots") }

// HasState reports whether the directory already holds a Raft log: a node
// restarted on it rejoins with its data instead of starting afresh.
func (d DataDir) HasState() bool {
	fi, err := os.Stat(d.RaftDB())
	return err == nil && fi.Size() > 0
}
