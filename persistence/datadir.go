package persistence

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sluice-rl/sluice/internal/atomicfile"
)

// DataDir is the layout of one node's data directory:
//
//	<root>/raft-log      which log store the directory holds: "bolt" or "wal"
//	                     on its first line; a second line, once the
//	                     cluster version is above 1, for older releases
//	                     (RecordClusterVersion)
//	<root>/cluster-version  the highest cluster version the node's log
//	                     reached (RecordClusterVersion), checked at start
//	<root>/raft.db       the bolt log store: Raft's log and stable store
//	<root>/raft-wal/     the wal log store: segment files and wal-meta.db
//	<root>/snapshots/    Raft's file snapshot store, one directory per snapshot
//	<root>/shards        how many Raft groups the node runs (ClaimShards)
//	<root>/group-<g>/    group g's own data dir, laid out as this one (g >= 1)
//
// Only one of raft.db and raft-wal/ is ever used in one directory: the
// raft-log file records which (ClaimLogStore), so a node started with the
// other store is refused instead of starting an empty log next to a full
// one. The root, raft-wal/ and snapshots/ are created 0700 (raft.db is
// 0600), so whatever modes Raft gives the files below, only the owner can
// read the state.
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
	if fi, err := os.Stat(d.root); err == nil && !fi.IsDir() {
		return DataDir{}, fmt.Errorf("persistence: data dir %q is not a directory", d.root)
	}
	for _, dir := range []string{d.root, d.SnapshotDir()} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			if errors.Is(err, syscall.EROFS) {
				return DataDir{}, fmt.Errorf("persistence: data dir %q cannot be created: the file system is read-only: %w", dir, err)
			}
			return DataDir{}, fmt.Errorf("persistence: data dir %q cannot be created: %w", dir, err)
		}
	}
	if err := checkWritable(d.root); err != nil {
		return DataDir{}, err
	}
	return d, nil
}

// checkWritable fails with a clear error when dir does not take a new,
// synced file: a read-only file system or mount, or no permission.
func checkWritable(dir string) error {
	path := filepath.Join(dir, ".sluice-write-check")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = f.Write([]byte("ok\n"))
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if rerr := os.Remove(path); err == nil {
			err = rerr
		}
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("persistence: data dir %q is read-only (a read-only file system or mount): sluice must write its Raft log there: %w", dir, err)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("persistence: data dir %q is read-only for this process (permissions): sluice must write its Raft log there: %w", dir, err)
	}
	return fmt.Errorf("persistence: data dir %q cannot be written: %w", dir, err)
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

// WALDir is the directory of the wal log store.
func (d DataDir) WALDir() string { return filepath.Join(d.root, "raft-wal") }

// logStoreFile records which log store the directory holds.
func (d DataDir) logStoreFile() string { return filepath.Join(d.root, "raft-log") }

// The log stores a data dir can hold.
const (
	LogStoreBolt = "bolt"
	LogStoreWAL  = "wal"
)

// HasState reports whether the directory already holds a Raft log (of
// either store): a node restarted on it rejoins with its data instead of
// starting afresh.
func (d DataDir) HasState() bool {
	return d.boltHasState() || d.walHasState()
}

func (d DataDir) boltHasState() bool {
	fi, err := os.Stat(d.RaftDB())
	return err == nil && fi.Size() > 0
}

func (d DataDir) walHasState() bool {
	ents, err := os.ReadDir(d.WALDir())
	return err == nil && len(ents) > 0
}

// LogStore returns the log store the directory holds: the one recorded by
// ClaimLogStore, or for a directory from before the record existed, the
// one whose files are there; "" for a directory with no log yet.
func (d DataDir) LogStore() (string, error) {
	b, err := os.ReadFile(d.logStoreFile())
	switch {
	case err == nil:
		// The first line: a second may hold the cluster version's marker.
		first, _, _ := strings.Cut(string(b), "\n")
		kind := strings.TrimSpace(first)
		if kind != LogStoreBolt && kind != LogStoreWAL {
			return "", fmt.Errorf("persistence: %s names an unknown log store %q", d.logStoreFile(), kind)
		}
		return kind, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("persistence: read %s: %w", d.logStoreFile(), err)
	}
	bolt, wal := d.boltHasState(), d.walHasState()
	switch {
	case bolt && wal:
		return "", fmt.Errorf("persistence: data dir %q holds both %s and %s and does not say which is its log: move the one not in use away",
			d.root, d.RaftDB(), d.WALDir())
	case bolt:
		return LogStoreBolt, nil
	case wal:
		return LogStoreWAL, nil
	}
	return "", nil
}

// StoredLogStore is LogStore for the data dir at root, without creating
// anything: "" when root does not exist or holds no log yet.
func StoredLogStore(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("persistence: data dir %q: %w", root, err)
	}
	if fi, err := os.Stat(abs); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("persistence: data dir %q cannot be created or read: %w", abs, err)
	} else if err == nil && !fi.IsDir() {
		return "", fmt.Errorf("persistence: data dir %q is not a directory", abs)
	}
	return DataDir{root: abs}.LogStore()
}

// LogStoreMismatchError is returned by ClaimLogStore when the directory
// holds the other log store's log.
type LogStoreMismatchError struct {
	Dir  string // the data dir
	Has  string // the store whose log it holds
	Want string // the store asked for
}

func (e *LogStoreMismatchError) Error() string {
	return fmt.Sprintf("data dir %q holds a Raft log in the %q log store, but the %q log store was asked for: "+
		"a node must keep the store its data dir was created with (or start on an empty data dir)", e.Dir, e.Has, e.Want)
}

// ClaimLogStore records that the directory holds kind's log, or returns a
// *LogStoreMismatchError if it already holds the other store's. Call it
// before opening the store: a node must never start an empty log of one
// store next to the full log of the other, which would forget every
// decision the directory holds.
func (d DataDir) ClaimLogStore(kind string) error {
	if kind != LogStoreBolt && kind != LogStoreWAL {
		return fmt.Errorf("persistence: unknown log store %q", kind)
	}
	has, err := d.LogStore()
	if err != nil {
		return err
	}
	if has != "" && has != kind {
		return &LogStoreMismatchError{Dir: d.root, Has: has, Want: kind}
	}
	if kind == LogStoreWAL {
		if err := os.MkdirAll(d.WALDir(), 0o700); err != nil {
			return fmt.Errorf("persistence: create %s: %w", d.WALDir(), err)
		}
	}
	if _, err := os.Stat(d.logStoreFile()); err == nil {
		return nil
	}
	if err := atomicfile.WriteFile(d.logStoreFile(), []byte(kind+"\n")); err != nil {
		return fmt.Errorf("persistence: record the log store: %w", err)
	}
	return nil
}

// GroupDir is the data dir of Raft group g inside a node's data dir root:
// the root itself for group 0 (so a node with one group keeps the layout
// it always had), and <root>/group-<g>/ for the others, each a DataDir of
// its own.
func GroupDir(root string, g int) string {
	if g == 0 {
		return root
	}
	return filepath.Join(root, fmt.Sprintf("group-%d", g))
}

// shardsFile records how many Raft groups a node's data dir was made with.
func shardsFile(root string) string { return filepath.Join(root, "shards") }

// ShardMismatchError is returned by ClaimShards when the data dir was made
// with another number of Raft groups.
type ShardMismatchError struct {
	Dir  string // the data dir
	Has  int    // the shard count it was made with
	Want int    // the shard count asked for
}

func (e *ShardMismatchError) Error() string {
	return fmt.Sprintf("data dir %q was made with --shards %d, but --shards %d was given: "+
		"the slots of a data dir's groups cannot be re-divided by a restart; start with --shards %d, "+
		"or on an empty data dir", e.Dir, e.Has, e.Want, e.Has)
}

// ClaimShards records that the data dir at root holds shards Raft groups,
// or returns a *ShardMismatchError when it was made with another count. A
// directory without the record that already holds a log (made before the
// record existed) was made with one group. Call it before opening any
// group's store.
func ClaimShards(root string, shards int) error {
	if shards < 1 {
		return fmt.Errorf("persistence: shard count %d", shards)
	}
	d, err := OpenDataDir(root)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(shardsFile(d.root))
	switch {
	case err == nil:
		var has int
		if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &has); err != nil || has < 1 {
			return fmt.Errorf("persistence: %s does not hold a shard count: %q", shardsFile(d.root), b)
		}
		if has != shards {
			return &ShardMismatchError{Dir: d.root, Has: has, Want: shards}
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("persistence: read %s: %w", shardsFile(d.root), err)
	}
	if d.HasState() && shards != 1 {
		return &ShardMismatchError{Dir: d.root, Has: 1, Want: shards}
	}
	if err := atomicfile.WriteFile(shardsFile(d.root), []byte(fmt.Sprintf("%d\n", shards))); err != nil {
		return fmt.Errorf("persistence: record the shard count: %w", err)
	}
	return nil
}

// clusterVersionFile records the highest cluster version the data dir's
// log has reached.
func (d DataDir) clusterVersionFile() string { return filepath.Join(d.root, "cluster-version") }

// ClusterVersion returns the cluster version the data dir records, 0 when
// it records none (a new directory, or one of a release before versions,
// which ran version 1).
func (d DataDir) ClusterVersion() (uint32, error) {
	b, err := os.ReadFile(d.clusterVersionFile())
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("persistence: read %s: %w", d.clusterVersionFile(), err)
	}
	var v uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &v); err != nil || v < 1 {
		return 0, fmt.Errorf("persistence: %s does not hold a cluster version: %q", d.clusterVersionFile(), b)
	}
	return v, nil
}

// RecordClusterVersion records that the log reached cluster version v
// (when it is above what the directory records), before the node goes on,
// so that a binary that cannot run v refuses the directory at start
// (CheckClusterVersion) instead of replaying a log it cannot apply.
//
// Releases from before cluster versions (v0.1.0) know no such file; what
// they do read at every start is raft-log, and they refuse one whose
// content is not exactly a store's name, quoting it. So once v is above
// 1, raft-log gets a second line saying why (needs, such as "sluice
// v0.2.0 or later"): those releases then refuse to start with that line in
// their error, and this and later releases read the first line only.
func (d DataDir) RecordClusterVersion(v uint32, needs string) error {
	has, err := d.ClusterVersion()
	if err != nil {
		return err
	}
	if v <= has {
		return nil
	}
	if v > 1 {
		kind, err := d.LogStore()
		if err != nil {
			return err
		}
		if kind != "" {
			marker := fmt.Sprintf("%s\nthis data dir is at cluster version %d: it needs %s\n", kind, v, needs)
			if err := atomicfile.WriteFile(d.logStoreFile(), []byte(marker)); err != nil {
				return fmt.Errorf("persistence: record the cluster version in %s: %w", d.logStoreFile(), err)
			}
		}
	}
	if err := atomicfile.WriteFile(d.clusterVersionFile(), []byte(fmt.Sprintf("%d\n", v))); err != nil {
		return fmt.Errorf("persistence: record the cluster version: %w", err)
	}
	return nil
}

// ClusterVersionError is returned by CheckClusterVersion for a data dir
// whose log reached a cluster version the binary does not support.
type ClusterVersionError struct {
	Dir       string // the data dir
	Has       uint32 // the cluster version it records
	Supported uint32 // the highest this binary supports
}

func (e *ClusterVersionError) Error() string {
	return fmt.Sprintf("data dir %q is at cluster version %d, but this binary supports cluster version %d at most: "+
		"its log may hold entries this binary cannot apply, so it refuses to start; run a release that supports "+
		"cluster version %d (CHANGELOG.md), or start on an empty data dir", e.Dir, e.Has, e.Supported, e.Has)
}

// CheckClusterVersion returns a *ClusterVersionError when the data dir
// records a cluster version above supported. Call it before opening the
// log.
func (d DataDir) CheckClusterVersion(supported uint32) error {
	has, err := d.ClusterVersion()
	if err != nil {
		return err
	}
	if has > supported {
		return &ClusterVersionError{Dir: d.root, Has: has, Supported: supported}
	}
	return nil
}

// clusterIDFile holds the identity of a cluster made by a restore.
func clusterIDFile(root string) string { return filepath.Join(root, "cluster-id") }

// ClusterID returns the cluster identity recorded in the data dir at root
// ("" when none: a cluster not made by a restore, or no data dir yet).
func ClusterID(root string) (string, error) {
	b, err := os.ReadFile(clusterIDFile(root))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("persistence: read the cluster identity: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || len(id) > 64 || strings.ContainsAny(id, " \t\r\n") {
		return "", fmt.Errorf("persistence: %s does not hold a cluster identity: %q", clusterIDFile(root), b)
	}
	return id, nil
}

// WriteClusterID records the cluster identity id (1 to 64 bytes, no
// spaces) in the data dir at root.
func WriteClusterID(root, id string) error {
	if id == "" || len(id) > 64 || strings.ContainsAny(id, " \t\r\n") {
		return fmt.Errorf("persistence: invalid cluster identity %q", id)
	}
	if err := atomicfile.WriteFile(clusterIDFile(root), []byte(id+"\n")); err != nil {
		return fmt.Errorf("persistence: record the cluster identity: %w", err)
	}
	return nil
}
