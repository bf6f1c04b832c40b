// The state machine's snapshots (fsm.go applies the log): Snapshot takes
// a cheap copy on the FSM goroutine, Persist encodes it (persistence's
// format) while later entries apply, Restore replaces the whole state.

package cluster

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/persistence"
)

// Snapshot implements raft.FSM. It runs on the FSM goroutine, so no Apply
// runs meanwhile: it copies every stripe (ExportStripe copies keys and logs)
// and leaves the encoding to Persist, which runs concurrently with later
// Applies. The copy is the only part that stalls decisions.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	if h := f.halt.Load(); h != nil {
		// The state lacks the entry that halted it and all after: a
		// snapshot would claim them applied, and let Raft drop them.
		return nil, fmt.Errorf("cluster: no snapshot while the state machine is halted at %s", h)
	}
	start := time.Now()
	clock := f.eng.ClockState()
	s := &fsmSnapshot{
		header:  persistence.Header{Clock: clock, Format: snapshotFormat(f.version.Load())},
		stripes: make([][]engine.Record, f.eng.ExportShards()),
	}
	// This copy is the only part of a snapshot that stalls Apply (about
	// 85 ms per million keys; BenchmarkSnapshot). Copying on two goroutines
	// measured no faster: it is bound by allocation. States back at their
	// initial state at the last applied time stay so at every later time:
	// ExportStripe leaves them out, which changes no answer.
	for i := range s.stripes {
		s.stripes[i] = f.eng.ExportStripe(i, clock.Last)
	}
	s.header.Meta = append(s.header.Meta, [2]string{metaApplied, strconv.FormatUint(f.applied.Load(), 10)})
	if v := f.version.Load(); v > BaseVersion {
		s.header.Meta = append(s.header.Meta, [2]string{metaVersion, strconv.FormatUint(uint64(v), 10)})
	}
	f.mu.RLock()
	ids := make([]string, 0, len(f.leaders))
	for id := range f.leaders {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e := f.leaders[id]
		s.header.Meta = append(s.header.Meta, [2]string{metaLeaderPfx + id, e.RESP + " " + e.Forward})
	}
	f.mu.RUnlock()
	s.header.Meta = append(s.header.Meta, f.dedup.meta()...)
	s.header.Meta = append(s.header.Meta, scriptsMeta(f.eng.Scripts())...) // scripts.go
	for i, chunk := range f.eng.ExportWatches(clock.Last) {
		s.header.Meta = append(s.header.Meta, [2]string{metaWatchPfx + strconv.Itoa(i), string(chunk)})
	}
	if f.metrics != nil {
		f.metrics.snapCapture.Observe(time.Since(start).Seconds())
		s.persisted = f.metrics.snapPersist
	}
	return s, nil
}

// Restore implements raft.FSM: it replaces all state with the snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.eng.Reset()
	h, err := persistence.Decode(rc, f.eng.Import)
	if err != nil {
		f.eng.Reset()
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	f.restores.Add(1)
	f.eng.SetClockState(h.Clock)
	dedup, err := restoreDedup(h.Meta)
	if err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	f.dedup = dedup
	scripts, err := restoreScripts(h.Meta) // scripts.go
	if err != nil {
		return fmt.Errorf("cluster: restore snapshot: %w", err)
	}
	f.eng.LoadScripts(scripts)
	leaders := make(map[string]codec.Leader)
	version := BaseVersion
	var applied uint64
	watchChunks := 0
	for _, kv := range h.Meta {
		switch {
		case strings.HasPrefix(kv[0], metaWatchPfx):
			if err := f.eng.ImportWatches([]byte(kv[1]), watchChunks == 0); err != nil {
				return fmt.Errorf("cluster: restore snapshot: %s: %w", kv[0], err)
			}
			watchChunks++
		case kv[0] == metaVersion:
			n, err := strconv.ParseUint(kv[1], 10, 32)
			if err != nil || n < uint64(BaseVersion) {
				return fmt.Errorf("cluster: restore snapshot: cluster version %q", kv[1])
			}
			version = uint32(n)
		case kv[0] == metaApplied:
			n, err := strconv.ParseUint(kv[1], 10, 64)
			if err != nil {
				return fmt.Errorf("cluster: restore snapshot: applied index %q: %w", kv[1], err)
			}
			applied = n
			f.applied.Store(n)
		case strings.HasPrefix(kv[0], metaLeaderPfx):
			id := strings.TrimPrefix(kv[0], metaLeaderPfx)
			resp, fwd, ok := strings.Cut(kv[1], " ")
			if !ok {
				return fmt.Errorf("cluster: restore snapshot: leader %q: malformed addresses %q", id, kv[1])
			}
			leaders[id] = codec.Leader{ID: id, RESP: resp, Forward: fwd}
		}
	}
	f.mu.Lock()
	f.leaders = leaders
	f.mu.Unlock()
	// The snapshot is the whole state, so a halt before it is over; the
	// version is the snapshot's (a restore may only meet a lower one in a
	// cluster that was restored from a backup).
	f.halt.Store(nil)
	f.version.Store(BaseVersion)
	if err := f.raiseVersion(applied, version); err != nil {
		f.log.Error("restored a snapshot of a cluster version this build does not support", "group", f.group, "err", err)
	}
	return nil
}

// fsmSnapshot is a copy of the state taken on the FSM goroutine.
type fsmSnapshot struct {
	header    persistence.Header
	stripes   [][]engine.Record
	persisted prometheus.Observer // Persist's duration, or nil
}

// Persist implements raft.FSMSnapshot: it encodes the copy into the sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if s.persisted != nil {
		defer func(start time.Time) { s.persisted.Observe(time.Since(start).Seconds()) }(time.Now())
	}
	err := persistence.Encode(sink, s.header, func(i int) []engine.Record { return s.stripes[i] }, len(s.stripes))
	if err != nil {
		return errors.Join(fmt.Errorf("cluster: persist snapshot: %w", err), sink.Cancel())
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("cluster: persist snapshot: close sink: %w", err)
	}
	return nil
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() { s.stripes = nil }
