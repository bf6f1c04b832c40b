package logstore

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"

	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/persistence"
)

// countingVFS counts the syncs that reach the segment files.
type countingVFS struct {
	types.VFS
	syncs atomic.Int64
}

func (v *countingVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &countingFile{WritableFile: f, n: &v.syncs}, nil
}

func (v *countingVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return &countingFile{WritableFile: f, n: &v.syncs}, nil
}

type countingFile struct {
	types.WritableFile
	n *atomic.Int64
}

func (f *countingFile) Sync() error {
	f.n.Add(1)
	return f.WritableFile.Sync()
}

func appendN(t *testing.T, logs raft.LogStore, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := logs.StoreLog(&raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
}

// TestWALSyncsPerMode: with the wal store, always syncs the segment on
// every append; everysec syncs nothing on append and everything on the
// flusher's tick; no syncs only on a clean close. The stable state is
// durable in every mode and survives a reopen.
func TestWALSyncsPerMode(t *testing.T) {
	tests := []struct {
		fsync                           string
		afterAppends, afterTick, closed int64 // segment syncs seen
	}{
		{FsyncAlways, 10, 10, 10},
		{FsyncEverysec, 0, 1, 1},
		{FsyncNo, 0, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.fsync, func(t *testing.T) {
			dir, err := persistence.OpenDataDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := dir.ClaimLogStore(WAL); err != nil {
				t.Fatal(err)
			}
			opts := Options{Store: WAL, Fsync: tc.fsync, Logger: testLogger(t)}
			var tick chan time.Time
			if tc.fsync == FsyncEverysec {
				tick = make(chan time.Time)
			}
			fs := &countingVFS{VFS: walfs.New()}
			st, err := openStore(opts, dir, hclog.NewNullLogger(), tick, fs)
			if err != nil {
				t.Fatal(err)
			}
			base := fs.syncs.Load() // opening may sync a new segment
			appendN(t, st.Logs, 1, 10)
			if got := fs.syncs.Load() - base; got != tc.afterAppends {
				t.Fatalf("%d segment syncs after 10 appends, want %d", got, tc.afterAppends)
			}
			if tick != nil {
				tick <- time.Time{}
				waitFor(t, 5*time.Second, func() error {
					if st.flusher.flushes.Load() < 1 {
						return errors.New("no flush yet")
					}
					return nil
				})
				// A tick with nothing written since syncs nothing.
				tick <- time.Time{}
				waitFor(t, 5*time.Second, func() error {
					if st.flusher.flushes.Load() < 2 {
						return errors.New("no second flush yet")
					}
					return nil
				})
			}
			if got := fs.syncs.Load() - base; got != tc.afterTick {
				t.Fatalf("%d segment syncs after the flusher ran, want %d", got, tc.afterTick)
			}
			if err := st.Stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if got := fs.syncs.Load() - base; got != tc.closed {
				t.Fatalf("%d segment syncs after close, want %d", got, tc.closed)
			}

			st, err = openStore(opts, dir, hclog.NewNullLogger(), nil, walfs.New())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if last, err := st.Logs.LastIndex(); err != nil || last != 10 {
				t.Fatalf("after reopen: last index %d, %v; want 10", last, err)
			}
			if term, err := st.Stable.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
				t.Fatalf("after reopen: term %d, %v; want 7", term, err)
			}
		})
	}
}

// countingStable counts writes and the syncs that follow them.
type countingStable struct {
	raft.StableStore
	order []string
}

func (s *countingStable) Set(k, v []byte) error { s.order = append(s.order, "set"); return nil }
func (s *countingStable) SetUint64(k []byte, v uint64) error {
	s.order = append(s.order, "set")
	return nil
}

// TestSyncedStable: with bolt's syncs off, every stable write is followed
// by a sync.
func TestSyncedStable(t *testing.T) {
	inner := &countingStable{}
	s := syncedStable{StableStore: inner, sync: func() error { inner.order = append(inner.order, "sync"); return nil }}
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(inner.order, ","); got != "set,sync,set,sync" {
		t.Fatalf("order %s, want set,sync,set,sync", got)
	}
}

// TestFlusher: every tick syncs once; a failed sync is counted and the
// loop goes on; stop ends it.
func TestFlusher(t *testing.T) {
	results := []error{nil, nil, nil, errors.New("disk on fire"), nil}
	var calls atomic.Int64
	tick := make(chan time.Time)
	f := startFlusher(func() error {
		return results[calls.Add(1)-1]
	}, tick, testLogger(t))
	for range results {
		tick <- time.Time{}
	}
	if err := f.stop(); err != nil {
		t.Fatal(err)
	}
	// The loop is done: every tick it accepted ran to the end.
	if calls.Load() != 5 || f.flushes.Load() != 4 || f.failed.Load() != 1 {
		t.Fatalf("calls %d flushes %d failed %d, want 5, 4, 1", calls.Load(), f.flushes.Load(), f.failed.Load())
	}
}

// TestBoltEverysecFlushes: the bolt store in everysec mode syncs on the
// flusher's tick, and its log and stable state survive a reopen.
func TestBoltEverysecFlushes(t *testing.T) {
	dir, err := persistence.OpenDataDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Store: Bolt, Fsync: FsyncEverysec, Logger: testLogger(t)}
	tick := make(chan time.Time)
	st, err := openStore(opts, dir, hclog.NewNullLogger(), tick, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.fault.cur.stable.(syncedStable); !ok {
		t.Fatalf("bolt everysec: the stable store %T does not sync its writes", st.fault.cur.stable)
	}
	appendN(t, st.Logs, 1, 5)
	tick <- time.Time{}
	tick <- time.Time{}
	if err := st.flusher.stop(); err != nil {
		t.Fatal(err)
	}
	if n, f := st.flusher.flushes.Load(), st.flusher.failed.Load(); n != 2 || f != 0 {
		t.Fatalf("%d flushes, %d failed; want 2, 0", n, f)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = openStore(opts, dir, hclog.NewNullLogger(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if last, err := st.Logs.LastIndex(); err != nil || last != 5 {
		t.Fatalf("after reopen: last index %d, %v; want 5", last, err)
	}
}

// fakeMeta records the states committed.
type fakeMeta struct {
	types.MetaStore
	commits int
}

func (m *fakeMeta) CommitState(types.PersistentState) error { m.commits++; return nil }

// TestSyncFirstMetaSealing: in a lazy mode, the segment files are synced
// before a segment list that seals a segment is committed, and not before
// other changes (compaction), which would stall appends.
func TestSyncFirstMetaSealing(t *testing.T) {
	inner := &countingVFS{VFS: walfs.New()}
	vfs := newLazySyncVFS(inner, true)
	dir := t.TempDir()
	f, err := vfs.Create(dir, "seg-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	write := func() {
		t.Helper()
		if _, err := f.WriteAt([]byte("entry"), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil { // lazy: only marks it dirty
			t.Fatal(err)
		}
	}
	meta := &fakeMeta{}
	m := &syncFirstMeta{MetaStore: meta, vfs: vfs}
	open := types.PersistentState{NextSegmentID: 2, Segments: []types.SegmentInfo{{ID: 1, BaseIndex: 1, MinIndex: 1}}}
	sealed := types.PersistentState{NextSegmentID: 3, Segments: []types.SegmentInfo{
		{ID: 1, BaseIndex: 1, MinIndex: 1, MaxIndex: 10, SealTime: time.Unix(1, 0), IndexStart: 100},
		{ID: 2, BaseIndex: 11, MinIndex: 11},
	}}
	compacted := sealed
	compacted.Segments = []types.SegmentInfo{sealed.Segments[0], sealed.Segments[1]}
	compacted.Segments[0].MinIndex = 5

	steps := []struct {
		name  string
		state types.PersistentState
		syncs int64
	}{
		{"a new open segment", open, 0},
		{"the segment sealed", sealed, 1},
		{"compaction", compacted, 1},
	}
	for _, st := range steps {
		write()
		if err := m.CommitState(st.state); err != nil {
			t.Fatal(err)
		}
		if got := inner.syncs.Load(); got != st.syncs {
			t.Fatalf("%s: %d syncs of the segment files, want %d", st.name, got, st.syncs)
		}
	}
	if meta.commits != len(steps) {
		t.Fatalf("%d commits reached the meta store, want %d", meta.commits, len(steps))
	}
}

// TestWALTailTruncationSurvivesRestart: a follower whose log conflicts
// with a new leader's deletes its log's suffix; the wal store must open
// again after that (raft-wal v0.4.0 sealed the segment without its index
// and then refused to open: hashicorp/raft-wal#31, fixed in v0.4.1).
func TestWALTailTruncationSurvivesRestart(t *testing.T) {
	for _, fsync := range []string{FsyncAlways, FsyncEverysec} {
		t.Run(fsync, func(t *testing.T) {
			dir, err := persistence.OpenDataDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := dir.ClaimLogStore(WAL); err != nil {
				t.Fatal(err)
			}
			opts := Options{Store: WAL, Fsync: fsync, Logger: testLogger(t)}
			st, err := openStore(opts, dir, hclog.NewNullLogger(), nil, walfs.New())
			if err != nil {
				t.Fatal(err)
			}
			appendN(t, st.Logs, 1, 10)
			if err := st.Logs.DeleteRange(9, 10); err != nil { // the conflicting suffix
				t.Fatal(err)
			}
			appendN(t, st.Logs, 9, 4)
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			st, err = openStore(opts, dir, hclog.NewNullLogger(), nil, walfs.New())
			if err != nil {
				t.Fatalf("reopen after a tail truncation: %v", err)
			}
			defer st.Close()
			for i := uint64(1); i <= 12; i++ {
				var l raft.Log
				if err := st.Logs.GetLog(i, &l); err != nil || l.Index != i || string(l.Data) != fmt.Sprint(i) {
					t.Fatalf("entry %d after reopen: %+v, %v", i, l, err)
				}
			}
		})
	}
}

// testLogger discards the log unless SLUICE_TEST_LOG is set.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitFor polls fn until it returns nil, failing the test after timeout.
func waitFor(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	testkit.Eventually(t, timeout, 5*time.Millisecond, fn)
}
