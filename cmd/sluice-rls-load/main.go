// Command sluice-rls-load is a small gRPC load generator for Envoy's rate
// limit service (envoyproxy/ratelimit or sluice's --rls-addr): callers each
// send one ShouldRateLimit at a time, for a duration, and it prints the
// throughput, the latency percentiles and, given the servers' process ids,
// their CPU time per request (from /proc).
//
//	sluice-rls-load -addr 127.0.0.1:8081 -callers 50 -descriptors 3 -duration 5s -pids 1234
//
// Requests use the domain "bench" and, per descriptor, a key of its own
// ("d0", "d1", "d2") with a value drawn from -values, so that a rule
// `key: d0` (and so on) with a large limit counts them. Several -addr (comma
// separated) spread the callers over them, as Envoy spreads its calls over
// a cluster's nodes.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	pbstruct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/bench"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sluice-rls-load:", err)
		os.Exit(1)
	}
}

// result is one run's figures, printed as one JSON line.
type result struct {
	Label       string  `json:"label"`
	Callers     int     `json:"callers"`
	Descriptors int     `json:"descriptors"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	OverLimit   int64   `json:"over_limit"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	P50Micros   float64 `json:"p50_us"`
	P99Micros   float64 `json:"p99_us"`
	CPUMicros   float64 `json:"cpu_us_per_request"`
	// LoadCPUMicros is this load generator's own CPU time per request:
	// on a machine it shares with the servers it is the CPU the servers
	// could not have.
	LoadCPUMicros float64 `json:"load_cpu_us_per_request"`
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sluice-rls-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addrs := fs.String("addr", "127.0.0.1:8081", "gRPC address(es) of the rate limit service, comma-separated")
	callers := fs.Int("callers", 50, "concurrent callers, one call in flight each")
	descriptors := fs.Int("descriptors", 1, "descriptors per request (1 to 10)")
	values := fs.Int("values", 10000, "distinct values per descriptor key")
	duration := fs.Duration("duration", 5*time.Second, "measured length")
	warmup := fs.Duration("warmup", time.Second, "unmeasured load first")
	pids := fs.String("pids", "", "process ids whose CPU time is charged to the requests (comma-separated)")
	label := fs.String("label", "", "label of the printed line")
	codec := fs.String("codec", "raw", "raw: requests assembled from pre-encoded parts, responses read for their overall code only (raw.go); proto: the stubs' messages, marshalled per call")
	gogc := fs.Int("gogc", 400, "the load generator's own GOGC: its garbage collector's work is CPU the servers on the same machine cannot have (the servers are not affected)")
	cpuProfile := fs.String("cpuprofile", "", "write the load generator's own CPU profile of the measured phase to this file")
	format := fs.String("format", "json", "json: one JSON line; bench: one Go benchmark line, which benchstat reads")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *descriptors < 1 || *descriptors > 10 || *callers < 1 || *values < 1 {
		return errors.New("-descriptors 1..10, -callers and -values at least 1")
	}
	if *codec != "raw" && *codec != "proto" {
		return errors.New("-codec raw or proto")
	}
	if *format != "json" && *format != "bench" {
		return errors.New("-format json or bench")
	}
	debug.SetGCPercent(*gogc)
	// The values, rendered once: the callers draw from them.
	vals := make([]string, *values)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	var clients []pb.RateLimitServiceClient
	var conns []*grpc.ClientConn
	for _, a := range strings.Split(*addrs, ",") {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithSharedWriteBuffer(true))
		if err != nil {
			return err
		}
		defer conn.Close()
		clients = append(clients, pb.NewRateLimitServiceClient(conn))
		conns = append(conns, conn)
	}
	var procs []int
	for _, p := range strings.Split(*pids, ",") {
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("-pids: %w", err)
		}
		procs = append(procs, n)
	}

	type caller struct {
		lat                bench.Latencies
		n, errs, overLimit int64
	}
	enc, err := newRequestEncoder("bench", *descriptors, vals)
	if err != nil {
		return err
	}
	cs := make([]caller, *callers)
	startCh, endCh := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	for i := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &cs[i]
			cl, conn := clients[i%len(clients)], conns[i%len(conns)]
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			req := &pb.RateLimitRequest{Domain: "bench"}
			for d := 0; d < *descriptors; d++ {
				req.Descriptors = append(req.Descriptors, &pbstruct.RateLimitDescriptor{Entries: []*pbstruct.RateLimitDescriptor_Entry{{Key: "d" + strconv.Itoa(d)}}})
			}
			picks := make([]int, *descriptors)
			var raw, rawResp rawMsg
			call := func() (bool, error) {
				for d := range picks {
					picks[d] = rng.IntN(len(vals))
				}
				if *codec == "proto" {
					for d, r := range req.Descriptors {
						r.Entries[0].Value = vals[picks[d]]
					}
					r, err := cl.ShouldRateLimit(context.Background(), req)
					return err == nil && r.OverallCode == pb.RateLimitResponse_OVER_LIMIT, err
				}
				raw.b = enc.append(raw.b[:0], picks)
				err := conn.Invoke(context.Background(), pb.RateLimitService_ShouldRateLimit_FullMethodName, &raw, &rawResp, grpc.ForceCodec(rawCodec{}))
				if err != nil {
					raw.b = nil // gRPC may still hold the bytes it was sending
					return false, err
				}
				code, err := overallCode(rawResp.b)
				return code == pb.RateLimitResponse_OVER_LIMIT, err
			}
			measured := false
			for {
				select {
				case <-endCh:
					return
				case <-startCh:
					measured = true
				default:
				}
				t := time.Now()
				over, err := call()
				if !measured {
					continue
				}
				c.lat.Record(int64(time.Since(t)))
				c.n++
				switch {
				case err != nil:
					c.errs++
				case over:
					c.overLimit++
				}
			}
		}()
	}
	time.Sleep(*warmup)
	cpu0, own0, err := cpuTimes(procs)
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
	}
	start := time.Now()
	close(startCh)
	time.Sleep(*duration)
	close(endCh)
	elapsed := time.Since(start)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	cpu1, own1, err := cpuTimes(procs)
	if err != nil {
		return err
	}
	wg.Wait()
	res := result{Label: *label, Callers: *callers, Descriptors: *descriptors, Seconds: elapsed.Seconds()}
	var all bench.Latencies
	for i := range cs {
		res.Requests += cs[i].n
		res.Errors += cs[i].errs
		res.OverLimit += cs[i].overLimit
		all.Merge(cs[i].lat)
	}
	lat := all.Summary()
	res.P50Micros = float64(lat.P50 / 1000)
	res.P99Micros = float64(lat.P99 / 1000)
	res.PerSecond = float64(res.Requests) / elapsed.Seconds()
	if res.Requests > 0 && len(procs) > 0 {
		res.CPUMicros = float64((cpu1 - cpu0).Microseconds()) / float64(res.Requests)
	}
	if res.Requests > 0 {
		res.LoadCPUMicros = float64((own1 - own0).Microseconds()) / float64(res.Requests)
	}
	if *format == "bench" {
		name := strings.NewReplacer(" ", "/", "=", "-").Replace(cmp.Or(res.Label, "run"))
		_, err := fmt.Fprintf(stdout, "BenchmarkRLS/%s/callers=%d/descriptors=%d %d %.1f ns/op %.0f p50-us %.0f p99-us %.2f server-cpu-us/op\n",
			name, res.Callers, res.Descriptors, res.Requests, 1e9/max(res.PerSecond, 1e-9), res.P50Micros, res.P99Micros, res.CPUMicros)
		return err
	}
	return json.NewEncoder(stdout).Encode(res)
}

// cpuTimes is the CPU time of the servers' processes and of this one.
func cpuTimes(servers []int) (srv, own time.Duration, err error) {
	if srv, err = cpuTime(servers); err == nil {
		own, err = cpuTime([]int{os.Getpid()})
	}
	return srv, own, err
}

// cpuTime is the user and system CPU time of the processes (bench's
// reader of /proc/PID/stat, which the benchmark tool uses too).
func cpuTime(pids []int) (time.Duration, error) {
	secs, err := bench.ProcessCPU(pids)
	if err != nil {
		return 0, err
	}
	return time.Duration(secs * float64(time.Second)), nil
}
