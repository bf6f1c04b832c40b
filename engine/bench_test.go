package engine

import (
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func benchKeys(n int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		var kb [15]byte
		keys[i] = append([]byte(nil), benchKey(&kb, uint64(i))...)
	}
	return keys
}

// benchKey writes "key:%011d" of i (15 bytes) into kb, so that benchmarks
// over a million keys measure the engine's memory accesses, not a key
// table's.
func benchKey(kb *[15]byte, i uint64) []byte {
	copy(kb[:4], "key:")
	for j := 14; j >= 4; j-- {
		kb[j] = byte('0' + i%10)
		i /= 10
	}
	return kb[:]
}

// benchDecide runs Decide on 1024 existing keys, time moving 1 µs per call.
func benchDecide(b *testing.B, r Rule) {
	e := New(Config{})
	keys := benchKeys(1024)
	now := t0
	for _, k := range keys {
		e.Decide(now, k, r, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now += 1000
		e.Decide(now, keys[i&1023], r, 1)
	}
}

func BenchmarkEngineToken(b *testing.B)   { benchDecide(b, Rule{KindToken, 100, ms}) }
func BenchmarkEngineLeaky(b *testing.B)   { benchDecide(b, Rule{KindLeaky, 100, ms}) }
func BenchmarkEngineFixed(b *testing.B)   { benchDecide(b, Rule{KindFixed, 1000, sec}) }
func BenchmarkEngineSliding(b *testing.B) { benchDecide(b, Rule{KindSliding, 1000, sec}) }
func BenchmarkEngineLog(b *testing.B)     { benchDecide(b, Rule{KindLog, 100, 100 * ms}) }
func BenchmarkEngineGCRA(b *testing.B)    { benchDecide(b, Rule{KindGCRA, 100, ms}) }

// BenchmarkEngineTokenParallel: RunParallel over 1M distinct pre-created
// keys, each goroutine visiting them in its own pseudo-random order.
func BenchmarkEngineTokenParallel(b *testing.B) { benchDecideParallel(b, 1<<20) }

// benchDecideParallel runs Decide under RunParallel over n (a power of two)
// pre-created token keys, each goroutine in its own pseudo-random order.
func benchDecideParallel(b *testing.B, n uint64) {
	e := New(Config{})
	r := Rule{KindToken, 100, ms}
	var kb [15]byte
	for i := range n {
		e.Decide(t0, benchKey(&kb, i), r, 1)
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		x := seed.Add(0x9E3779B97F4A7C15) | 1
		now := t0
		var kb [15]byte
		for pb.Next() {
			x = xorshift(x)
			now += 100
			e.Decide(now, benchKey(&kb, x&(n-1)), r, 1)
		}
	})
}

func xorshift(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

// BenchmarkEngineMemory creates 1M token keys of 15 bytes and reports the
// heap they take per key.
func BenchmarkEngineMemory(b *testing.B) {
	const n = 1_000_000
	keys := benchKeys(n)
	r := Rule{KindToken, 100, sec}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		e := New(Config{})
		for _, k := range keys {
			e.Decide(t0, k, r, 1)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if e.Len() != n {
			b.Fatalf("Len %d", e.Len())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/key")
		runtime.KeepAlive(e)
	}
}

// BenchmarkEngineTokenParallelHot is BenchmarkEngineTokenParallel over 4096
// keys, which stay in cache: the engine's CPU cost without memory latency.
func BenchmarkEngineTokenParallelHot(b *testing.B) { benchDecideParallel(b, 1<<12) }

// applyBatch is a batch of 64 token decisions on keys of 15 bytes that
// fill draws at random out of n (a power of two).
type applyBatch struct {
	keys    []byte
	ops     []Op
	results []Result
}

const applyBatchLen = 64

func newApplyBatch() *applyBatch {
	ab := &applyBatch{keys: make([]byte, applyBatchLen*15), ops: make([]Op, applyBatchLen), results: make([]Result, applyBatchLen)}
	for i := range ab.ops {
		ab.ops[i] = Op{Code: OpDecide, Rule: Rule{KindToken, 100, ms}, Cost: 1, Key: ab.keys[i*15 : (i+1)*15]}
	}
	return ab
}

// fill draws the batch's keys with the xorshift state x and returns it.
func (ab *applyBatch) fill(x, n uint64) uint64 {
	var kb [15]byte
	for i := range ab.ops {
		x = xorshift(x)
		copy(ab.ops[i].Key, benchKey(&kb, x&(n-1)))
	}
	return x
}

// BenchmarkEngineApplyParallel is BenchmarkEngineTokenParallel through the
// batch entry point that the FSM and the single node's pipelines use: each
// Apply call decides 64 keys at one time (ns/op is per decision).
func BenchmarkEngineApplyParallel(b *testing.B) {
	const n = 1 << 20
	e := New(Config{})
	var kb [15]byte
	for i := range uint64(n) {
		e.Decide(t0, benchKey(&kb, i), Rule{KindToken, 100, ms}, 1)
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		x := seed.Add(0x9E3779B97F4A7C15) | 1
		wall := t0
		ab := newApplyBatch()
		for {
			x = ab.fill(x, n)
			wall += 100 * applyBatchLen
			e.Apply(wall, ab.ops, ab.results)
			for range applyBatchLen {
				if !pb.Next() {
					return
				}
			}
		}
	})
}

// BenchmarkEngineApplyChurn is the server's workload on uniform random
// keys: 64 decisions per Apply over 1M possible keys, each key seen so
// rarely that its bucket is full again (reclaimable) by its next decision,
// and the sweep reclaiming as the server's sweeper does. Most decisions
// create their key again (ns/op is per decision).
func BenchmarkEngineApplyChurn(b *testing.B) {
	const n = 1 << 20
	e := New(Config{})
	x := uint64(88172645463325252)
	wall := t0
	ab := newApplyBatch()
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += applyBatchLen {
		x = ab.fill(x, n)
		wall += 100 * applyBatchLen
		e.Apply(wall, ab.ops, ab.results)
		if done%(applyBatchLen*16) == 0 {
			e.Sweep(wall, 1024)
		}
	}
	b.ReportMetric(float64(e.Len()), "keys")
}

// BenchmarkAllVsToken compares, at 16 goroutines (P16) over 64k users and
// 1k tenants, one RL.ALL of three limits per call (a user's requests, the
// user's tokens, the tenant's requests) with one RL.TOKEN per call on one
// of those same keys, each through Apply as the server calls it. RL.ALL
// locks up to three stripes, looks its keys up together, evaluates and then
// charges. The engine is bound by cache misses here, and RL.ALL has three
// keys to miss on; at the server, parsing and the network dominate.
func BenchmarkAllVsToken(b *testing.B) {
	b.Run("token", func(b *testing.B) { runAllVsToken(b, false, 1) })
	b.Run("all3", func(b *testing.B) { runAllVsToken(b, true, 1) })
	b.Run("token-batch16", func(b *testing.B) { runAllVsToken(b, false, 16) })
	b.Run("all3-batch16", func(b *testing.B) { runAllVsToken(b, true, 16) })
}

// runAllVsToken runs BenchmarkAllVsToken's calls (RL.ALL of three limits,
// or RL.TOKEN on one of the same keys) with batch calls per Apply: 16 is
// how the server applies a connection's pipeline of 16 (the look-ahead
// across calls). One b.N is one call.
func runAllVsToken(b *testing.B, all bool, batch int) {
	const users, tenants = 1 << 16, 1 << 10
	rpm := Rule{KindToken, 1 << 40, ms}
	tpm := Rule{KindToken, 1 << 50, 1}
	ten := Rule{KindToken, 1 << 50, 1}
	e := New(Config{})
	var seed atomic.Uint64
	b.SetParallelism(16 / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		x := seed.Add(0x9E3779B97F4A7C15) | 1
		ops := make([]Op, batch)
		res := make([]Result, batch)
		lims := make([]Limit, 3*batch)
		each := make([]Result, 3*batch)
		keys := make([][15]byte, 3*batch)
		n := 0
		for pb.Next() {
			x = xorshift(x)
			u := x & (users - 1)
			l := lims[3*n : 3*n+3 : 3*n+3]
			uk, tk, nk := benchKey(&keys[3*n], u), benchKey(&keys[3*n+1], u), benchKey(&keys[3*n+2], u&(tenants-1))
			tk[0], nk[0] = 't', 'T'
			l[0] = Limit{Key: uk, Rule: rpm, Cost: 1}
			l[1] = Limit{Key: tk, Rule: tpm, Cost: 733}
			l[2] = Limit{Key: nk, Rule: ten, Cost: 1}
			if all {
				ops[n] = Op{Code: OpAll, All: l, Each: each[3*n : 3*n+3 : 3*n+3]}
			} else {
				one := &l[x>>62%3]
				ops[n] = Op{Code: OpDecide, Key: one.Key, Rule: one.Rule, Cost: one.Cost}
			}
			if n++; n == batch {
				e.Apply(t0, ops, res)
				n = 0
			}
		}
		if n > 0 {
			e.Apply(t0, ops[:n], res)
		}
	})
}

// BenchmarkAll3Keys is sluice-bench's all3 workload in the engine alone:
// Apply of batches of 16 calls (a connection's pipeline) from one
// goroutine, each an RL.ALL of three token buckets, a user (one of 100k),
// its tenant (user/100) and a shared key (user/10000), against "token",
// RL.TOKEN on the user's key. Only the user's key is likely cold. One b.N
// is one call.
func BenchmarkAll3Keys(b *testing.B) {
	for _, all := range []bool{false, true} {
		name := "token"
		if all {
			name = "all3"
		}
		b.Run(name, func(b *testing.B) {
			const users = 100000
			rule := Rule{KindToken, 1 << 40, 60000 * ms}
			e := New(Config{})
			ops := make([]Op, 16)
			res := make([]Result, 16)
			lims := make([]Limit, 48)
			each := make([]Result, 48)
			var kb [48][24]byte
			key := func(i int, prefix string, v uint64) []byte {
				b := append(kb[i][:0], prefix...)
				return strconv.AppendUint(b, v, 10)
			}
			x := uint64(0x9E3779B97F4A7C15)
			batch := func() {
				for n := range ops {
					x = xorshift(x)
					u := x % users
					l := lims[3*n : 3*n+3 : 3*n+3]
					l[0] = Limit{Key: key(3*n, "u:", u), Rule: rule, Cost: 1}
					l[1] = Limit{Key: key(3*n+1, "t:", u/100), Rule: rule, Cost: 1}
					l[2] = Limit{Key: key(3*n+2, "g:", u/10000), Rule: rule, Cost: 1}
					if all {
						ops[n] = Op{Code: OpAll, All: l, Each: each[3*n : 3*n+3 : 3*n+3]}
					} else {
						ops[n] = Op{Code: OpDecide, Key: l[0].Key, Rule: rule, Cost: 1}
					}
				}
				e.Apply(t0, ops, res)
			}
			for range users / 4 { // most keys exist, as after a warm-up
				batch()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += len(ops) {
				batch()
			}
		})
	}
}

// BenchmarkLeases: on a concurrency key holding n live leases (at its
// limit), alternately an acquire that is denied (it computes the retry
// time) and a renewal (which moves a lease in the expiry order): both are
// O(log n).
func BenchmarkLeases(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			e := New(Config{MaxLogLimit: 100000})
			r := Rule{KindConcurrency, int64(n), int64(time.Hour)}
			key := []byte("conc")
			for i := range n {
				op := Op{Code: OpAcquire, Key: key, Rule: r, Cost: 1, Token: []byte(fmt.Sprintf("lease-%d", i))}
				if res := e.acquireOp(t0+int64(i), &op); !res.Allowed {
					b.Fatalf("setup acquire %d: %s", i, fmtResult(res))
				}
			}
			deny := Op{Code: OpAcquire, Key: key, Rule: r, Cost: 1, Token: []byte("another")}
			renew := Op{Code: OpAcquire, Key: key, Rule: r, Cost: 1}
			toks := make([][]byte, 64)
			for i := range toks {
				toks[i] = []byte(fmt.Sprintf("lease-%d", i*n/len(toks)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now := t0 + int64(n) + int64(i)
				if i%2 == 0 {
					if res := e.acquireOp(now, &deny); res.Allowed || res.RetryAfter < 1 {
						b.Fatalf("deny: %s", fmtResult(res))
					}
				} else { // a renewal moves a lease in the expiry order
					renew.Token = toks[i/2%len(toks)]
					if res := e.acquireOp(now, &renew); !res.Allowed {
						b.Fatalf("renew: %s", fmtResult(res))
					}
				}
			}
		})
	}
}

// BenchmarkEngineApplyMixed: Apply over batches of 64 ops of four codes in
// turn (a decision, a peek, EXISTS and GET, on 1024 existing keys), so
// that no two neighbours share a code and each op goes through Apply's
// dispatch by its row (ns/op is per op).
func BenchmarkEngineApplyMixed(b *testing.B) {
	e := New(Config{})
	keys := benchKeys(1024)
	rule := Rule{KindToken, 100, ms}
	for _, k := range keys {
		e.Decide(t0, k, rule, 1)
	}
	codes := [...]OpCode{OpDecide, OpPeek, OpExists, OpGet}
	ops := make([]Op, 64)
	res := make([]Result, len(ops))
	for i := range ops {
		ops[i] = Op{Code: codes[i%len(codes)], Key: keys[i*13%len(keys)]}
		if ops[i].Code == OpDecide {
			ops[i].Rule, ops[i].Cost = rule, 1
		}
	}
	wall := t0
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += len(ops) {
		wall += 1000
		e.Apply(wall, ops, res)
	}
}
