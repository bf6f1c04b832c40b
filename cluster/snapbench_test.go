package cluster

import (
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/engine"
)

type discardSink struct{ io.Writer }

func (discardSink) ID() string    { return "bench" }
func (discardSink) Cancel() error { return nil }
func (discardSink) Close() error  { return nil }

var _ raft.SnapshotSink = discardSink{}

// BenchmarkSnapshot measures the stall a snapshot puts on the FSM (the
// copy in Snapshot) and the encoding that follows off the apply path.
func BenchmarkSnapshot(b *testing.B) {
	eng := engine.New(engine.Config{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	rule := engine.Rule{Kind: engine.KindToken, Limit: 100, Period: int64(time.Second)}
	const keys = 1_000_000
	ops := make([]engine.Op, 1000)
	res := make([]engine.Result, 1000)
	for i := 0; i < keys; i += len(ops) {
		for j := range ops {
			ops[j] = engine.Op{Code: engine.OpDecide, Key: []byte("user:" + strconv.Itoa(i+j)), Rule: rule, Cost: 1}
		}
		eng.Apply(now, ops, res)
	}
	f := newFSM(eng, testLogger(b), nil)
	b.ResetTimer()
	var copyTime, persistTime time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		s, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		copyTime += time.Since(start)
		start = time.Now()
		if err := s.Persist(discardSink{io.Discard}); err != nil {
			b.Fatal(err)
		}
		persistTime += time.Since(start)
		s.Release()
	}
	b.ReportMetric(float64(copyTime.Milliseconds())/float64(b.N), "copy-ms")
	b.ReportMetric(float64(persistTime.Milliseconds())/float64(b.N), "encode-ms")
}
