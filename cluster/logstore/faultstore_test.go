package logstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"

	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/testkit"
	"github.com/sluice-rl/sluice/persistence"
)

// walWith10 makes a wal store in a new data dir holding entries 1 to 10,
// appended in batches of 2 (each batch one commit), and returns the data
// dir and the tail segment's path.
func walWith10(t *testing.T) (persistence.DataDir, string) {
	t.Helper()
	dir, err := persistence.OpenDataDir(t.TempDir())
	if err == nil {
		err = dir.ClaimLogStore(WAL)
	}
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Store: WAL, Fsync: FsyncAlways, Logger: testLogger(t)}
	st, err := openStore(opts, dir, hclog.NewNullLogger(), nil, walfs.New())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 10; i += 2 {
		logs := []*raft.Log{{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: []byte("entry")},
			{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: []byte("entry")}}
		if err := st.Logs.StoreLogs(logs); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir.WALDir(), "*.wal"))
	if len(segs) != 1 {
		t.Fatalf("segments %v", segs)
	}
	return dir, segs[0]
}

// lastIndexAfterOpen opens the store with fsync mode and returns its last
// index, or the open's error.
func lastIndexAfterOpen(t *testing.T, dir persistence.DataDir, fsync string) (uint64, error) {
	t.Helper()
	opts := Options{Store: WAL, Fsync: fsync, Logger: testLogger(t)}
	st, err := openStore(opts, dir, hclog.NewNullLogger(), nil, walfs.New())
	if err != nil {
		return 0, err
	}
	defer st.Close()
	return st.Logs.LastIndex()
}

// TestTornTail: a last batch cut short (its commit frame gone) is dropped
// with --fsync always (never acknowledged) and refused with everysec (it
// may have been); damage before the last batch is refused in every mode;
// an intact log opens as it is.
func TestTornTail(t *testing.T) {
	dir, seg := walWith10(t)
	if last, err := lastIndexAfterOpen(t, dir, FsyncEverysec); err != nil || last != 10 {
		t.Fatalf("intact log: last %d, %v", last, err)
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := scanTail(f)
	if err != nil || tail.torn != 0 || tail.badCommit {
		t.Fatalf("intact scan %+v, %v", tail, err)
	}
	// Tear the last batch: its commit frame (the last 8 bytes) never
	// reached the disk.
	if _, err := f.WriteAt(make([]byte, 8), tail.validEnd-8); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = lastIndexAfterOpen(t, dir, FsyncEverysec)
	if err == nil || !strings.Contains(err.Error(), "torn batch of 2 entries") || !strings.Contains(err.Error(), "may have been acknowledged") {
		t.Fatalf("torn tail in everysec: %v", err)
	}
	if last, err := lastIndexAfterOpen(t, dir, FsyncAlways); err != nil || last != 8 {
		t.Fatalf("torn tail in always: last %d, %v; want 8", last, err)
	}
	// Dropped for good: the file now says what the store keeps.
	if last, err := lastIndexAfterOpen(t, dir, FsyncEverysec); err != nil || last != 8 {
		t.Fatalf("after the drop, everysec: last %d, %v", last, err)
	}

	// A file cut short in the last batch (its last bytes gone) is the
	// same torn batch.
	dir, seg = walWith10(t)
	f, err = os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail, err = scanTail(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(seg, tail.validEnd-3); err != nil {
		t.Fatal(err)
	}
	if _, err := lastIndexAfterOpen(t, dir, FsyncNo); err == nil || !strings.Contains(err.Error(), "torn batch") {
		t.Fatalf("a truncated tail in fsync no: %v", err)
	}
	if last, err := lastIndexAfterOpen(t, dir, FsyncAlways); err != nil || last != 8 {
		t.Fatalf("a truncated tail in always: last %d, %v; want 8", last, err)
	}

	// Damage before the tail: a byte of the first batch.
	dir, seg = walWith10(t)
	f, err = os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{'X'}, walFileHeaderLen+walFrameHeaderLen+1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, mode := range []string{FsyncAlways, FsyncEverysec} {
		if _, err := lastIndexAfterOpen(t, dir, mode); err == nil || !strings.Contains(err.Error(), "damaged before its last batch") {
			t.Fatalf("damage before the tail, %s: %v", mode, err)
		}
	}
}

// failingStore is a log store whose writes fail while fail is set.
type failingStore struct {
	*raft.InmemStore
	fail *atomic.Bool
}

func (s failingStore) StoreLogs(logs []*raft.Log) error {
	if s.fail.Load() {
		return errors.New("no space left on device")
	}
	return s.InmemStore.StoreLogs(logs)
}

// TestFaultStore: a failed append faults the store: appends fail at once
// with MISCONF's detail, the probe is retried, and once it succeeds the
// store is reopened, entries a failed append left are deleted, and appends
// work again.
func TestFaultStore(t *testing.T) {
	var fail, probeFails atomic.Bool
	probeFails.Store(true)
	mem := raft.NewInmemStore()
	var opens atomic.Int32
	open := func() (storeImpl, error) {
		opens.Add(1)
		st := failingStore{InmemStore: mem, fail: &fail}
		return storeImpl{logs: st, stable: mem, sync: func() error { return nil }, close: func() error { return nil }}, nil
	}
	impl, _ := open()
	probeCalls := make(chan struct{}, 100)
	s, err := newFaultStore(impl, open, func() error {
		probeCalls <- struct{}{}
		if probeFails.Load() {
			return errors.New("still full")
		}
		return nil
	}, testLogger(t), "/data/raft-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	entry := func(i uint64) []*raft.Log { return []*raft.Log{{Index: i, Term: 1, Data: []byte("x")}} }
	if err := s.StoreLogs(entry(1)); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := s.StoreLogs(entry(2)); err == nil || !strings.Contains(err.Error(), FaultedText) {
		t.Fatalf("failed append: %v", err)
	}
	fail.Store(false) // the disk has room again, but the store is not trusted yet
	if err := s.StoreLogs(entry(2)); err == nil {
		t.Fatal("an append went through a faulted store")
	}
	if e := errcode.Of(s.Fault()); e == nil || e.Code != errcode.LogWriteFailed || !strings.Contains(e.Detail, "no space left on device") ||
		!strings.Contains(e.Detail, "/data/raft-wal") {
		t.Fatalf("Fault() = %v", s.Fault())
	}
	<-probeCalls
	// An entry a failed append left behind (written, then its fsync failed).
	_ = mem.StoreLogs(entry(2))
	probeFails.Store(false)
	testkit.Eventually(t, 5*time.Second, time.Millisecond, func() error {
		if err := s.Fault(); err != nil {
			return fmt.Errorf("the store never recovered: %w", err)
		}
		return nil
	})
	if last, _ := s.LastIndex(); last != 1 {
		t.Fatalf("after the recovery the log ends at %d, want 1 (the failed append's entry deleted)", last)
	}
	if err := s.StoreLogs(entry(2)); err != nil {
		t.Fatalf("append after the recovery: %v", err)
	}
	if opens.Load() < 2 {
		t.Errorf("the store was opened %d times, want a reopen", opens.Load())
	}
}
