package cluster

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
)

// freeAddrs returns n loopback addresses with ports free right now.
func freeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	var addrs []string
	var lns []net.Listener
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return addrs
}

// durableCluster starts n durable nodes (TCP transport on loopback) and
// returns them with the index of the leader. The log store and durability
// mode are the defaults (bolt, always) unless SLUICE_BENCH_LOG_STORE and
// SLUICE_BENCH_FSYNC say otherwise.
func durableCluster(b *testing.B, n int) ([]*Node, int) {
	b.Helper()
	addrs := freeAddrs(b, n)
	peers := make(map[string]string)
	for i, a := range addrs {
		peers["n"+strconv.Itoa(i+1)] = a
	}
	nodes := make([]*Node, n)
	hosts := make([]*Host, n)
	for i := range nodes {
		cfg := Config{
			ID:          "n" + strconv.Itoa(i+1),
			RaftAddr:    addrs[i],
			RESPAddr:    fmt.Sprintf("127.0.0.1:%d", 16001+i),
			ForwardAddr: "127.0.0.1:0",
			DataDir:     b.TempDir(),
			Logger:      testLogger(b),
			LogStore:    os.Getenv("SLUICE_BENCH_LOG_STORE"),
			Fsync:       os.Getenv("SLUICE_BENCH_FSYNC"),
		}
		if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_INFLIGHT")); err == nil {
			cfg.MaxInflight = v
		}
		if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_FILL")); err == nil {
			cfg.BatchFill = v
		}
		if n > 1 {
			cfg.Peers = peers
		}
		h, err := NewHost(context.Background(), cfg, []*engine.Engine{engine.New(engine.Config{})})
		if err != nil {
			b.Fatal(err)
		}
		hosts[i], nodes[i] = h, h.nodes[0]
	}
	b.Cleanup(func() {
		for _, h := range hosts {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			h.Close(ctx)
			cancel()
		}
	})
	leader := -1
	waitFor(b, 20*time.Second, func() error {
		for i, node := range nodes {
			if k := node.route().kind; k == routeLocal {
				leader = i
			}
		}
		if leader < 0 {
			return fmt.Errorf("no leader")
		}
		for _, node := range nodes {
			if k := node.route().kind; k != routeLocal && k != routeForward {
				return fmt.Errorf("not every node is ready")
			}
		}
		return nil
	})
	return nodes, leader
}

// benchExecute runs b.N RL.TOKEN operations on random keys from clients
// goroutines, each calling Execute with pipeline operations at a time on
// one of nodes, and reports throughput, latency per Execute and how many
// operations an average log entry carried.
func benchExecute(b *testing.B, leader *Node, nodes []*Node, clients, pipeline int) {
	rule := engine.Rule{Kind: engine.KindToken, Limit: 1000, Period: int64(time.Millisecond)}
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_CLIENTS")); err == nil {
		clients = v
	}
	entries0, ops0 := leader.commitStats()
	cpu0 := cpuTime()
	var mu sync.Mutex
	var lat []time.Duration
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(c)))
			node := nodes[c%len(nodes)]
			ops := make([]engine.Op, pipeline)
			res := make([]engine.Result, pipeline)
			keys := make([][]byte, pipeline)
			local := make([]time.Duration, 0, 1024)
			for next.Add(int64(pipeline)) <= int64(b.N)+int64(pipeline)-1 {
				for i := range ops {
					keys[i] = strconv.AppendInt(append(keys[i][:0], "user:"...), int64(rng.Intn(100000)), 10)
					ops[i] = engine.Op{Code: engine.OpDecide, Key: keys[i], Rule: rule, Cost: 1}
				}
				start := time.Now()
				if err := node.Execute(context.Background(), ops, res); err != nil {
					b.Error(err)
					return
				}
				local = append(local, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	b.StopTimer()
	entries1, ops1 := leader.commitStats()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	// CPU per operation (all nodes and clients of this process together)
	// is steadier than throughput on a shared machine.
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	if entries1 > entries0 {
		b.ReportMetric(float64(ops1-ops0)/float64(entries1-entries0), "ops/entry")
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSingleNodeDurable: one durable voter (fsync on), 256 clients
// with one operation per call.
func BenchmarkSingleNodeDurable(b *testing.B) {
	nodes, leader := durableCluster(b, 1)
	benchExecute(b, nodes[leader], nodes, 256, 1)
}

// BenchmarkClusterThreeNodes: three durable voters on loopback TCP, 256
// clients on the leader with one operation per call.
func BenchmarkClusterThreeNodes(b *testing.B) {
	nodes, leader := durableCluster(b, 3)
	benchExecute(b, nodes[leader], nodes[leader:leader+1], 256, 1)
}

// BenchmarkClusterThreeNodesForwarded: as above, with the clients spread
// over all three nodes, two thirds of them forwarded by followers.
func BenchmarkClusterThreeNodesForwarded(b *testing.B) {
	nodes, leader := durableCluster(b, 3)
	benchExecute(b, nodes[leader], nodes, 256, 1)
}

// BenchmarkClusterThreeNodesP1: the shape of redis-benchmark -c 50 (P1)
// against the leader: 50 clients of one operation per call, the batcher's
// hardest case (see submitNow).
func BenchmarkClusterThreeNodesP1(b *testing.B) {
	nodes, leader := durableCluster(b, 3)
	benchExecute(b, nodes[leader], nodes[leader:leader+1], 50, 1)
}

// BenchmarkClusterThreeNodesPipelined: the shape of redis-benchmark -c 50
// -P 16 against the leader: 50 clients, 16 operations per call.
func BenchmarkClusterThreeNodesPipelined(b *testing.B) {
	nodes, leader := durableCluster(b, 3)
	benchExecute(b, nodes[leader], nodes[leader:leader+1], 50, 16)
}

// BenchmarkSingleNodeDurablePipelined: the same shape on one node.
func BenchmarkSingleNodeDurablePipelined(b *testing.B) {
	nodes, leader := durableCluster(b, 1)
	benchExecute(b, nodes[leader], nodes, 50, 16)
}
