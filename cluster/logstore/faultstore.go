package logstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// Disk faults (docs/operations.md, "Disk faults").
//
// A log store whose write fails (a full disk, an I/O error) is not trusted
// again as it is: raft-wal, after a full disk stopped the rotation to a new
// segment, answers "segment is sealed" to every later append, forever; and
// after a failed fsync the kernel may have dropped the dirty pages, so what
// the open files show need not be what the disk holds. The faultStore sits
// between Raft (and its log cache) and the store:
//
//   - A write that fails (an append, a deletion, the flusher's sync)
//     records a fault. From then on a leader's appends fail at once with
//     it: Raft's leader steps down and answers the entry's callers with the
//     error, which the batcher turns into MISCONF (errcode.LogWriteFailed).
//     A follower's appends are held until the recovery (write explains
//     why), and the leader keeps the entries.
//   - A recovery loop probes the disk (a file as large as the next write
//     the store will need) every recoverEvery. Once the probe succeeds it
//     closes the store, repairs what a failed rotation left (raft-wal: a
//     sealed tail becomes a sealed segment with a new tail after it, as the
//     rotation would have made it), reopens it, and deletes every entry
//     after the last one an append acknowledged (lastGood): an append that
//     failed may have left entries in the files (written, then its fsync
//     failed), which Raft never counted as stored, replicated or committed,
//     and whose callers were told MISCONF, which promises "not applied".
//     Then the fault is cleared and appends go through again: the node
//     serves again (a single node elects itself, a follower catches up from
//     its leader) with no restart.
//   - Writes of Raft's stable state (term, vote) cannot fail in Raft's eyes
//     (it panics), so one that fails records the fault and is retried until
//     it succeeds or the store closes; while the store is faulted they wait
//     for the recovery, so a node that cannot append neither campaigns nor
//     votes (retryStable).

// recoverEvery is how often a faulted store probes the disk.
const recoverEvery = 250 * time.Millisecond

// walSegmentSize is what raft-wal preallocates for a new segment, which a
// wal store's probe must be able to allocate.
const walSegmentSize = 64 << 20

// storeImpl is one opening of a log store.
type storeImpl struct {
	logs   raft.LogStore
	stable raft.StableStore
	sync   func() error // flushes the log (the everysec flusher)
	close  func() error
}

// diskFault describes a write to the log store that failed.
type diskFault struct {
	op    string // what failed: "append to the log", ...
	dir   string
	err   error
	since time.Time
}

// coded returns the error commands that need the log get: MISCONF.
func (f *diskFault) coded() error {
	return &errcode.Error{Code: errcode.LogWriteFailed,
		Detail: fmt.Sprintf("%s in %s failed: %v", f.op, f.dir, f.err)}
}

// errStoreFaulted is what a faulted store's appends return.
type errStoreFaulted struct{ f *diskFault }

// FaultedText opens the text of the error a faulted store's appends
// return. Raft's log cache flattens a store's error into text, so the
// batcher recognises this one by it.
const FaultedText = "the raft log cannot be written: "

func (e errStoreFaulted) Error() string {
	return fmt.Sprintf("%s%s in %s failed: %v", FaultedText, e.f.op, e.f.dir, e.f.err)
}

// faultStore is a raft.LogStore and raft.StableStore over a storeImpl that
// it reopens after a fault (see above). Lock order: mu is a leaf; it is
// write-held only by the recovery loop while it swaps the store.
type faultStore struct {
	open  func() (storeImpl, error) // opens (and repairs) the store
	probe func() error              // checks that the disk takes writes
	log   *slog.Logger
	dir   string

	mu  sync.RWMutex
	cur storeImpl // logs nil while closed

	fault   atomic.Pointer[diskFault]
	leading atomic.Pointer[func() bool] // nil: treated as leading
	// onLeaderFault runs when a leader's write fails (diskhandoff.go).
	onLeaderFault atomic.Pointer[func()]
	lastGood      atomic.Uint64 // the last index an append acknowledged

	quit chan struct{}
	done chan struct{}
	once sync.Once

	released    chan struct{} // closed by releaseHolds
	releaseOnce sync.Once
}

func newFaultStore(impl storeImpl, open func() (storeImpl, error), probe func() error, log *slog.Logger, dir string) (*faultStore, error) {
	last, err := impl.logs.LastIndex()
	if err != nil {
		return nil, fmt.Errorf("cluster: read the log: %w", err)
	}
	s := &faultStore{open: open, probe: probe, log: log, dir: dir, cur: impl,
		quit: make(chan struct{}), done: make(chan struct{}), released: make(chan struct{})}
	s.lastGood.Store(last)
	go s.recoverLoop()
	return s, nil
}

// Fault returns the MISCONF error while the store cannot be written, else
// nil.
func (s *faultStore) Fault() error {
	if f := s.fault.Load(); f != nil {
		return f.coded()
	}
	return nil
}

func (s *faultStore) setFault(op string, err error) error {
	if errors.Is(err, wal.ErrSealed) {
		// The append sealed the segment earlier and the next one could not
		// be created (raft-wal only logs why): name the cause.
		if perr := s.probe(); perr != nil {
			err = fmt.Errorf("%w (the next segment cannot be created: %v)", err, perr)
		}
	}
	f := &diskFault{op: op, dir: s.dir, err: err, since: time.Now()}
	if s.fault.CompareAndSwap(nil, f) {
		s.log.Error("the raft log cannot be written: commands that need it fail with MISCONF until it can",
			"dir", s.dir, "op", op, "err", err)
	} else {
		f = s.fault.Load()
	}
	return errStoreFaulted{f: f}
}

// impl returns the current store, read-locked; release with s.mu.RUnlock.
func (s *faultStore) impl() (storeImpl, error) {
	s.mu.RLock()
	if s.cur.logs == nil {
		s.mu.RUnlock()
		if f := s.fault.Load(); f != nil {
			return storeImpl{}, errStoreFaulted{f: f}
		}
		return storeImpl{}, errors.New("the raft log store is closed")
	}
	return s.cur, nil
}

// FirstIndex implements raft.LogStore.
func (s *faultStore) FirstIndex() (uint64, error) {
	st, err := s.impl()
	if err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	return st.logs.FirstIndex()
}

// LastIndex implements raft.LogStore.
func (s *faultStore) LastIndex() (uint64, error) {
	st, err := s.impl()
	if err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	return st.logs.LastIndex()
}

// GetLog implements raft.LogStore.
func (s *faultStore) GetLog(index uint64, l *raft.Log) error {
	st, err := s.impl()
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	return st.logs.GetLog(index, l)
}

// StoreLog implements raft.LogStore.
func (s *faultStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: it records a fault when the store
// fails. While faulted, a leader's append fails at once (Raft steps down
// and answers its callers), and a follower's waits for the recovery and
// then goes to the reopened store (see holdWhileFaulted).
func (s *faultStore) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	return s.write("append to the log", func(l raft.LogStore) error {
		if err := l.StoreLogs(logs); err != nil {
			return err
		}
		s.lastGood.Store(logs[len(logs)-1].Index)
		return nil
	})
}

// DeleteRange implements raft.LogStore, as StoreLogs.
func (s *faultStore) DeleteRange(min, max uint64) error {
	return s.write("delete log entries", func(l raft.LogStore) error {
		if err := l.DeleteRange(min, max); err != nil {
			return err
		}
		if max >= s.lastGood.Load() && min > 0 {
			s.lastGood.Store(min - 1) // a suffix went
		}
		return nil
	})
}

// write runs a write of the log (op names it) on the current store.
//
// A follower's write is held while the store is faulted, rather than
// failed: a follower that answers the leader "not stored" while the
// leader pipelines entries to it can leave the leader's pipeline to it
// stuck for good (hashicorp/raft v1.8: the pipeline's decoder stops at the
// first refusal while its sender waits for room among the requests in
// flight; seen here, the follower never caught up). Held, the follower
// answers nothing until its disk takes writes again; the leader's requests
// time out and it retries, and the majority commits without it meanwhile.
func (s *faultStore) write(op string, do func(raft.LogStore) error) error {
	for {
		if f := s.fault.Load(); f != nil {
			if !s.holdWhileFaulted() {
				return errStoreFaulted{f: f}
			}
			continue
		}
		st, err := s.impl()
		if err != nil {
			return err
		}
		err = do(st.logs)
		s.mu.RUnlock()
		if err == nil {
			return nil
		}
		ferr := s.setFault(op, err)
		if !s.holdWhileFaulted() {
			if on := s.onLeaderFault.Load(); on != nil {
				(*on)() // a leader's append failed: it steps down
			}
			return ferr
		}
	}
}

// holdWhileFaulted waits, on a follower, until the store is not faulted,
// and reports whether it did (false at once on a leader, or when the store
// closes).
func (s *faultStore) holdWhileFaulted() bool {
	if lead := s.leading.Load(); lead == nil || (*lead)() {
		return false
	}
	for s.fault.Load() != nil {
		select {
		case <-s.quit:
			return false
		case <-s.released:
			return false
		case <-time.After(recoverEvery / 5):
		}
	}
	return true
}

// releaseHolds makes held and later follower writes fail instead of
// waiting (the node is closing: Raft's shutdown waits for its loop).
func (s *faultStore) releaseHolds() { s.releaseOnce.Do(func() { close(s.released) }) }

// setOnLeaderFault sets what runs when a write fails on a leader.
func (s *faultStore) setOnLeaderFault(f func()) { s.onLeaderFault.Store(&f) }

// setLeading tells the store how to know whether its node leads (a
// leader's writes fail at once while faulted; a follower's are held).
func (s *faultStore) setLeading(lead func() bool) { s.leading.Store(&lead) }

// Get implements raft.StableStore.
func (s *faultStore) Get(k []byte) ([]byte, error) {
	st, err := s.impl()
	if err != nil {
		return nil, err
	}
	defer s.mu.RUnlock()
	return st.stable.Get(k)
}

// GetUint64 implements raft.StableStore.
func (s *faultStore) GetUint64(k []byte) (uint64, error) {
	st, err := s.impl()
	if err != nil {
		return 0, err
	}
	defer s.mu.RUnlock()
	return st.stable.GetUint64(k)
}

// Set implements raft.StableStore.
func (s *faultStore) Set(k, v []byte) error {
	return s.retryStable(func(st raft.StableStore) error { return st.Set(k, v) })
}

// SetUint64 implements raft.StableStore.
func (s *faultStore) SetUint64(k []byte, v uint64) error {
	return s.retryStable(func(st raft.StableStore) error { return st.SetUint64(k, v) })
}

// retryStable runs a write of the stable state once the store is not
// faulted, until it succeeds or the store closes (Raft panics on a failed
// one). Holding it back while faulted keeps the node from campaigning
// (a new term is written first) or voting: a node that cannot append
// would otherwise win elections it cannot serve, step down at its first
// append, and win again, keeping the healthy nodes from electing one of
// them (seen with the leader's disk full).
func (s *faultStore) retryStable(write func(raft.StableStore) error) error {
	err := errors.New("the raft log store is closed")
	for {
		if s.fault.Load() == nil {
			var st storeImpl
			if st, err = s.impl(); err == nil {
				err = write(st.stable)
				s.mu.RUnlock()
				if err == nil {
					return nil
				}
				s.setFault("write the raft term and vote", err)
			}
		}
		select {
		case <-s.quit:
			return err
		case <-time.After(recoverEvery / 5):
		}
	}
}

// flush syncs the store (the everysec flusher); a failure is a fault.
func (s *faultStore) flush() error {
	st, err := s.impl()
	if err != nil {
		return err
	}
	defer s.mu.RUnlock()
	if err := st.sync(); err != nil {
		return s.setFault("flush the log to disk", err)
	}
	return nil
}

func (s *faultStore) recoverLoop() {
	defer close(s.done)
	t := time.NewTicker(recoverEvery)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		f := s.fault.Load()
		if f == nil {
			continue
		}
		if err := s.probe(); err != nil {
			continue
		}
		if err := s.reopen(); err != nil {
			s.log.Warn("the disk takes writes again, but reopening the raft log failed; retrying", "dir", s.dir, "err", err)
			continue
		}
		s.fault.Store(nil)
		s.log.Warn("the raft log can be written again", "dir", s.dir, "faulted_for", time.Since(f.since).Round(time.Millisecond))
	}
}

// reopen closes the store, opens it again, and deletes the entries after
// the last acknowledged append.
func (s *faultStore) reopen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.logs != nil {
		if err := s.cur.close(); err != nil {
			s.log.Warn("closing the faulted raft log store", "dir", s.dir, "err", err)
		}
		s.cur = storeImpl{}
	}
	st, err := s.open()
	if err != nil {
		return err
	}
	last, err := st.logs.LastIndex()
	if err == nil && last > s.lastGood.Load() {
		// Written by an append that failed: never acknowledged.
		s.log.Warn("dropping log entries a failed append left", "dir", s.dir, "from", s.lastGood.Load()+1, "to", last)
		err = st.logs.DeleteRange(s.lastGood.Load()+1, last)
	}
	if err == nil {
		err = st.sync()
	}
	if err != nil {
		_ = st.close()
		return err
	}
	s.cur = st
	return nil
}

// close stops the recovery loop and closes the store.
func (s *faultStore) close() error {
	s.once.Do(func() { close(s.quit) })
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur.logs == nil {
		return nil
	}
	err := s.cur.close()
	s.cur = storeImpl{}
	return err
}

// repairSealedTail finishes, in the wal store in dir, a rotation that a
// full disk stopped: when the last segment the meta store lists as open is
// sealed in its file (an append wrote its index and committed, then the
// next segment could not be created), it is recorded as sealed and a new
// empty tail segment after it is listed (the file is created by wal.Open),
// as raft-wal's rotation does. Without it, every append to the reopened
// log would fail with "segment is sealed".
func repairSealedTail(dir string, vfs types.VFS) error {
	meta := &metadb.BoltMetaDB{}
	defer meta.Close()
	st, err := meta.Load(dir)
	if err != nil {
		return err
	}
	if len(st.Segments) == 0 {
		return nil
	}
	tail := st.Segments[len(st.Segments)-1]
	if !tail.SealTime.IsZero() {
		return nil
	}
	w, err := segment.NewFiler(dir, vfs).RecoverTail(tail)
	if errors.Is(err, os.ErrNotExist) {
		return nil // wal.Open creates it
	}
	if err != nil {
		return err
	}
	sealed, indexStart, err := w.Sealed()
	last := w.LastIndex()
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil || !sealed {
		return err
	}
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	st.Segments[len(st.Segments)-1] = tail
	st.Segments = append(st.Segments, types.SegmentInfo{ID: st.NextSegmentID, BaseIndex: last + 1, MinIndex: last + 1,
		Codec: tail.Codec, SizeLimit: tail.SizeLimit, CreateTime: now})
	st.NextSegmentID++
	return meta.CommitState(st)
}

// probeWrite checks that dir takes size bytes: it allocates a file of
// that size (written where the system cannot reserve space), syncs it and
// removes it.
func probeWrite(dir string, size int64) error {
	path := filepath.Join(dir, ".sluice-probe")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	err = allocate(f, size)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeZeros writes size zero bytes to f.
func writeZeros(f *os.File, size int64) error {
	buf := make([]byte, min(size, 1<<20))
	for size > 0 {
		n, err := f.Write(buf[:min(int64(len(buf)), size)])
		if err != nil {
			return err
		}
		size -= int64(n)
	}
	return nil
}
