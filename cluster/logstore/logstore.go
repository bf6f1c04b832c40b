// Package logstore opens the stores under a node's Raft log: raft-wal or
// raft-boltdb in a data directory, with the durability mode (--fsync) and
// the everysec flusher (logstore.go), the fault store that survives a full
// or failing disk (faultstore.go), the torn-tail check of the wal
// (torntail.go) and the data directory's lock (dirlock_*.go). It knows
// nothing of Raft groups, the FSM or forwarding: cluster opens one Stores
// per node and hands its Logs and Stable to Raft.
//
// Lock order: lazySyncVFS.mu, lazyFile.mu and faultStore.mu are leaves,
// taken inside raft-wal's calls, Raft's and the flusher's, never with a
// lock of cluster held.
package logstore

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
	"go.etcd.io/bbolt"

	"github.com/sluice-rl/sluice/persistence"
)

// The log stores (cluster.Config.LogStore).
const (
	// Bolt keeps Raft's log and stable state in one bolt B+tree file
	// (raft-boltdb/v2). Each append is a bolt transaction: two fdatasyncs
	// (the pages, then the meta page) plus freelist work.
	Bolt = persistence.LogStoreBolt
	// WAL keeps Raft's log in append-only segment files
	// (hashicorp/raft-wal): one fsync per append, and compaction deletes
	// whole segments. Its stable state (term, vote) and the segment list
	// live in a small bolt file beside them.
	WAL = persistence.LogStoreWAL
)

// The durability modes (cluster.Config.Fsync), named after Redis's
// appendfsync.
//
// What each risks:
//   - FsyncAlways: nothing. An entry is on disk on a majority before it
//     commits, so an acknowledged decision survives any crash, including
//     every machine losing power at once.
//   - FsyncEverysec: entries are written to the operating system at once
//     (so they survive the process crashing) and flushed to disk by a
//     background loop at least once a second. A power loss (or kernel
//     crash) of a majority of machines within the same second can lose
//     the last second of acknowledged decisions; a minority can always
//     recover them from the others. With the bolt store, a machine that
//     loses power may also find raft.db unreadable (bolt's commit order
//     relies on its syncs) and must be rebuilt from its peers; the wal
//     store checksums every append and recovers up to the last complete
//     one.
//   - FsyncNo: as everysec, but nothing flushes the log explicitly: the
//     operating system writes it back when it chooses (Linux: within about
//     30 s), so a power loss can lose more.
//
// In every mode Raft's stable state (the current term and the vote) is
// synced on every change, as Raft's safety needs: a node that forgot its
// vote could vote twice in one term and let two leaders be elected. Those
// writes are rare (elections), so this costs nothing in steady state.
// With the wal store, the segment list is also synced on every change
// (rotation every 64 MiB, compaction), and the segment files before a
// change that seals one: the list never names sealed data that is not on
// disk.
const (
	FsyncAlways   = "always"
	FsyncEverysec = "everysec"
	FsyncNo       = "no"
)

// flushInterval is how often the everysec flusher syncs the log.
const flushInterval = time.Second

// Options says which store Open opens and how durably.
type Options struct {
	Store  string       // Bolt or WAL
	Fsync  string       // FsyncAlways, FsyncEverysec or FsyncNo
	Logger *slog.Logger // the flusher's and the fault store's log
}

// Stores is what Open opened: the log (without Raft's log cache) and the
// stable store, both watched for write faults (faultstore.go).
type Stores struct {
	// Logs is Raft's log store.
	Logs raft.LogStore
	// Stable is Raft's stable store (term, vote).
	Stable raft.StableStore

	fault   *faultStore // Logs and Stable, which watches their writes
	flusher *flusher    // nil unless everysec
	close   func() error
}

// Close stops the flusher and the fault store's recovery, syncs a lazy
// store and closes it.
func (s *Stores) Close() error { return s.close() }

// Fault returns the MISCONF error (errcode.LogWriteFailed) while the store
// cannot be written, else nil.
func (s *Stores) Fault() error { return s.fault.Fault() }

// SetLeading tells the store how to know whether its node leads: a
// leader's writes fail at once while the store is faulted, a follower's
// are held until it recovers.
func (s *Stores) SetLeading(lead func() bool) { s.fault.setLeading(lead) }

// SetOnLeaderFault sets what runs when a write fails on a leader.
func (s *Stores) SetOnLeaderFault(f func()) { s.fault.setOnLeaderFault(f) }

// ReleaseHolds makes held and later follower writes fail instead of
// waiting (the node is closing: Raft's shutdown waits for its loop).
func (s *Stores) ReleaseHolds() { s.fault.releaseHolds() }

// Open opens the log store opts names in dir, with opts' durability mode.
func Open(opts Options, dir persistence.DataDir, hlog hclog.Logger) (*Stores, error) {
	if err := dir.ClaimLogStore(opts.Store); err != nil {
		return nil, fmt.Errorf("cluster: log store: %w", err)
	}
	var tick <-chan time.Time
	var ticker *time.Ticker
	if opts.Fsync == FsyncEverysec {
		ticker = time.NewTicker(flushInterval)
		tick = ticker.C
	}
	st, err := openStore(opts, dir, hlog, tick, walfs.New())
	if err != nil {
		if ticker != nil {
			ticker.Stop()
		}
		return nil, err
	}
	if ticker != nil {
		inner := st.close
		st.close = func() error {
			ticker.Stop()
			return inner()
		}
	}
	return st, nil
}

// openStore opens the store; tick drives the everysec flusher (nil: none)
// and fs is the file system under the wal store (tests count its syncs).
// The store is wrapped in a faultStore (faultstore.go), which notices a
// write that fails, refuses writes until the disk takes them again, and
// then reopens the store below it.
func openStore(opts Options, dir persistence.DataDir, hlog hclog.Logger, tick <-chan time.Time, fs types.VFS) (*Stores, error) {
	lazy := opts.Fsync != FsyncAlways
	var (
		open     func() (storeImpl, error)
		unlock   = func() error { return nil }
		probeDir string
		probeLen int64
	)
	switch opts.Store {
	case WAL:
		var err error
		if unlock, err = lockDir(dir.WALDir()); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		vfs := newLazySyncVFS(fs, lazy)
		probeDir, probeLen = dir.WALDir(), walSegmentSize
		// A torn tail (a crash during an append) is dropped only when it
		// cannot have been acknowledged (torntail.go).
		dropped, err := checkTornTail(dir.WALDir(), lazy)
		if err != nil {
			_ = unlock()
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if dropped > 0 {
			opts.Logger.Warn("dropped the torn last batch of the raft log: a crash cut its write short, before the append returned (--fsync always), so it was never acknowledged",
				"dir", dir.WALDir(), "entries", dropped)
		}
		open = func() (storeImpl, error) {
			// A tail segment sealed by an append whose rotation then
			// failed (a full disk) is taken as sealed, with a new tail
			// after it, as the rotation would have done.
			if err := repairSealedTail(dir.WALDir(), vfs); err != nil {
				return storeImpl{}, fmt.Errorf("cluster: repair the wal log store in %s: %w", dir.WALDir(), err)
			}
			meta := &metadb.BoltMetaDB{}
			w, err := wal.Open(dir.WALDir(),
				wal.WithSegmentFiler(segment.NewFiler(dir.WALDir(), vfs)),
				wal.WithMetaStore(&syncFirstMeta{MetaStore: meta, vfs: vfs}),
				wal.WithLogger(hlog.Named("wal")))
			if err != nil {
				_ = meta.Close()
				return storeImpl{}, fmt.Errorf("cluster: open the wal log store in %s: %w", dir.WALDir(), err)
			}
			return storeImpl{logs: w, stable: w, sync: vfs.syncAll, close: func() error {
				// WAL.Close closes the segment files; sync them first in
				// every lazy mode, so a clean shutdown leaves the whole log
				// on disk.
				var err error
				if lazy {
					err = vfs.syncAll()
				}
				// WAL.Close closes the meta store too since v0.4.1 (v0.4.0
				// left it, and its lock on wal-meta.db, open); closing it
				// again is a no-op.
				return errors.Join(err, w.Close(), meta.Close())
			}}, nil
		}
	case Bolt:
		var err error
		if unlock, err = lockDir(dir.Root()); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		probeDir, probeLen = dir.Root(), 1<<20
		open = func() (storeImpl, error) {
			// The hashmap freelist: once snapshots start compacting the
			// log, bolt holds tens of thousands of free pages, and the
			// default array freelist merges and scans all of them on every
			// commit (bolt commits got 50% slower and cluster throughput
			// fell by a third after a few compactions; with the map it
			// stays flat).
			b, err := raftboltdb.New(raftboltdb.Options{
				Path:   dir.RaftDB(),
				NoSync: lazy,
				BoltOptions: &bbolt.Options{Timeout: time.Second, NoFreelistSync: true,
					FreelistType: bbolt.FreelistMapType, NoSync: lazy},
			})
			if err != nil {
				return storeImpl{}, fmt.Errorf("cluster: open %s (is another sluice using this data dir?): %w", dir.RaftDB(), err)
			}
			impl := storeImpl{logs: b, stable: b, sync: b.Sync, close: func() error {
				var err error
				if lazy {
					err = b.Sync()
				}
				return errors.Join(err, b.Close())
			}}
			if lazy {
				// The log and the stable state share one bolt file, whose
				// syncs are off: sync after every stable write ourselves.
				impl.stable = syncedStable{StableStore: b, sync: b.Sync}
			}
			return impl, nil
		}
	default:
		return nil, fmt.Errorf("cluster: unknown log store %q", opts.Store)
	}
	impl, err := open()
	if err != nil {
		_ = unlock()
		return nil, err
	}
	fst, err := newFaultStore(impl, open, func() error { return probeWrite(probeDir, probeLen) }, opts.Logger, probeDir)
	if err != nil {
		_ = impl.close()
		_ = unlock()
		return nil, err
	}
	st := &Stores{Logs: fst, Stable: fst, fault: fst}
	var fl *flusher
	if tick != nil {
		fl = startFlusher(fst.flush, tick, opts.Logger)
		st.flusher = fl
	}
	st.close = func() error {
		err := fl.stop()
		return errors.Join(err, fst.close(), unlock())
	}
	return st, nil
}

// syncedStable syncs after every write of the stable state, for a store
// whose own writes are not synced.
type syncedStable struct {
	raft.StableStore
	sync func() error
}

func (s syncedStable) Set(k, v []byte) error {
	if err := s.StableStore.Set(k, v); err != nil {
		return err
	}
	return s.sync()
}

func (s syncedStable) SetUint64(k []byte, v uint64) error {
	if err := s.StableStore.SetUint64(k, v); err != nil {
		return err
	}
	return s.sync()
}

// flusher syncs a store on every tick until stopped (everysec). The tick
// channel is injected so tests drive it.
type flusher struct {
	sync    func() error
	log     *slog.Logger
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	flushes atomic.Uint64 // completed syncs
	failed  atomic.Uint64 // failed syncs
}

func startFlusher(sync func() error, tick <-chan time.Time, log *slog.Logger) *flusher {
	f := &flusher{sync: sync, log: log, quit: make(chan struct{}), done: make(chan struct{})}
	go f.run(tick)
	return f
}

func (f *flusher) run(tick <-chan time.Time) {
	defer close(f.done)
	for {
		select {
		case <-tick:
			if err := f.sync(); err != nil {
				f.failed.Add(1)
				f.log.Error("flushing the raft log to disk", "err", err)
				continue
			}
			f.flushes.Add(1)
		case <-f.quit:
			return
		}
	}
}

// stop ends the loop and waits for it; nil-safe and idempotent.
func (f *flusher) stop() error {
	if f == nil {
		return nil
	}
	f.once.Do(func() { close(f.quit) })
	<-f.done
	return nil
}

// lazySyncVFS wraps raft-wal's file system so that, when lazy, a segment
// file's Sync only marks it dirty, and syncAll (the flusher's tick, and
// before every change of the segment list) syncs the dirty ones. Writes
// still go to the operating system at once (raft-wal writes each append
// with WriteAt before it calls Sync), so a process crash loses nothing.
type lazySyncVFS struct {
	types.VFS
	lazy bool

	mu   sync.Mutex // guards open; a leaf, held only to copy or edit the set
	open map[*lazyFile]struct{}
}

func newLazySyncVFS(inner types.VFS, lazy bool) *lazySyncVFS {
	return &lazySyncVFS{VFS: inner, lazy: lazy, open: make(map[*lazyFile]struct{})}
}

func (v *lazySyncVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil || !v.lazy {
		return f, err
	}
	return v.track(f), nil
}

func (v *lazySyncVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil || !v.lazy {
		return f, err
	}
	return v.track(f), nil
}

func (v *lazySyncVFS) track(f types.WritableFile) *lazyFile {
	lf := &lazyFile{WritableFile: f, vfs: v}
	v.mu.Lock()
	v.open[lf] = struct{}{}
	v.mu.Unlock()
	return lf
}

// syncAll syncs every open file written since its last sync.
func (v *lazySyncVFS) syncAll() error {
	if !v.lazy {
		return nil
	}
	v.mu.Lock()
	files := make([]*lazyFile, 0, len(v.open))
	for f := range v.open {
		files = append(files, f)
	}
	v.mu.Unlock()
	var errs []error
	for _, f := range files {
		if err := f.flush(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lazyFile is a segment file whose Sync is deferred to its flush.
type lazyFile struct {
	types.WritableFile
	vfs   *lazySyncVFS
	dirty atomic.Bool

	mu     sync.Mutex // serializes flush with Close; a leaf
	closed bool
}

// Sync marks the file dirty: the data is already written to the
// operating system; the flusher makes it durable.
func (f *lazyFile) Sync() error {
	f.dirty.Store(true)
	return nil
}

func (f *lazyFile) flush() error {
	if !f.dirty.Swap(false) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	if err := f.WritableFile.Sync(); err != nil {
		f.dirty.Store(true)
		return err
	}
	return nil
}

func (f *lazyFile) Close() error {
	f.vfs.mu.Lock()
	delete(f.vfs.open, f)
	f.vfs.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return f.WritableFile.Close()
}

// syncFirstMeta syncs the segment files before a change of the segment
// list that seals a segment (rotation), so the list (synced by its bolt
// file) never names a sealed segment whose data is not on disk. Other
// changes (compaction moving the first index, a new empty segment) name no
// unsynced data and skip the sync: compaction runs under the log's write
// lock, and a sync there would stall appends.
type syncFirstMeta struct {
	types.MetaStore
	vfs *lazySyncVFS

	// sealed holds the IDs of the segments known sealed; raft-wal calls
	// Load and CommitState from one goroutine at a time.
	sealed map[uint64]bool
}

func (m *syncFirstMeta) Load(dir string) (types.PersistentState, error) {
	s, err := m.MetaStore.Load(dir)
	if err == nil {
		m.remember(s)
	}
	return s, err
}

func (m *syncFirstMeta) CommitState(s types.PersistentState) error {
	for _, seg := range s.Segments {
		if !seg.SealTime.IsZero() && !m.sealed[seg.ID] {
			if err := m.vfs.syncAll(); err != nil {
				return fmt.Errorf("sync the segments before their list: %w", err)
			}
			break
		}
	}
	if err := m.MetaStore.CommitState(s); err != nil {
		return err
	}
	m.remember(s)
	return nil
}

func (m *syncFirstMeta) remember(s types.PersistentState) {
	m.sealed = make(map[uint64]bool, len(s.Segments))
	for _, seg := range s.Segments {
		if !seg.SealTime.IsZero() {
			m.sealed[seg.ID] = true
		}
	}
}
