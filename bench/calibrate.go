package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Calibration compares this tool's client with redis-benchmark on the same
// workload (token bucket, uniform keys "tb:" + 12 digits) against the same
// server: if the two agree, the load generator is not what limits the
// figures.
type Calibration struct {
	Target         string  `json:"target"`
	Pipeline       int     `json:"pipeline"`
	Conns          int     `json:"conns"`
	ThisClient     float64 `json:"this_client"`     // requests/s
	RedisBenchmark float64 `json:"redis_benchmark"` // requests/s
	Err            string  `json:"error,omitempty"`
}

// RedisBenchmarkArgs are redis-benchmark's arguments for the token-bucket
// request of target t with parameters p over keys "tb:" + 12 digits
// (__rand_int__ is replaced by a random 12-digit number below -r).
func RedisBenchmarkArgs(t *Target, p Params) ([]string, error) {
	switch d := t.Dialect.(type) {
	case SluiceDialect:
		return append([]string{"RL.TOKEN", MemoryKeyPrefix + "__rand_int__"}, SluiceArgs(AlgToken, p)...), nil
	case LuaDialect:
		name := "token_bucket.lua"
		args := LuaArgs(AlgToken, p)
		if d.Anchor {
			name, args = AnchorScript, args[:2]
		}
		return append([]string{"EVALSHA", ScriptSHA(name), "1", MemoryKeyPrefix + "__rand_int__"}, args...), nil
	}
	return nil, fmt.Errorf("no redis-benchmark command for %s", t.Name)
}

// runRedisBenchmark runs redis-benchmark for n requests and returns its
// requests per second.
func runRedisBenchmark(ctx context.Context, bin string, t *Target, conns, pipeline int, keys uint64, n int64, cmd []string) (float64, error) {
	host, port, ok := strings.Cut(t.Addrs[0], ":")
	if !ok {
		return 0, fmt.Errorf("bad address %q", t.Addrs[0])
	}
	args := []string{"-h", host, "-p", port, "-c", strconv.Itoa(conns), "-P", strconv.Itoa(pipeline),
		"-r", strconv.FormatUint(keys, 10), "-n", strconv.FormatInt(n, 10), "--csv"}
	args = append(args, cmd...)
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w", err)
	}
	recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil || len(recs) < 2 || len(recs[1]) < 2 {
		return 0, fmt.Errorf("redis-benchmark: unexpected output %q", shorten(string(out), 200))
	}
	rps, err := strconv.ParseFloat(recs[1][1], 64)
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: rps %q: %w", recs[1][1], err)
	}
	return rps, nil
}

// Calibrate measures each target with this tool's client and with
// redis-benchmark, alternately, at each pipeline depth. redis-benchmark
// runs as many requests as the tool's client answered in d.
func (r *Runner) Calibrate(ctx context.Context, targets []string, pipelines []int, conns int, keys uint64, d, warmup time.Duration) []Calibration {
	bin, lookErr := exec.LookPath("redis-benchmark")
	var out []Calibration
	p := MemoryParams()
	w := Workload{Alg: AlgToken, Keys: keys, Dist: DistUniform, Cost: 1, Prefix: MemoryKeyPrefix, Allow: p, Deny: p}
	for _, pl := range pipelines {
		for _, name := range targets {
			c := Calibration{Target: name, Pipeline: pl, Conns: conns}
			r.Progress.Step(fmt.Sprintf("client check: %s P%d", name, pl), 2*(d+warmup))
			t, err := r.Env.Get(ctx, name)
			if err == nil {
				err = t.Flush(ctx)
			}
			var lr LoadResult
			if err == nil {
				lr, err = RunLoad(ctx, w, t.Dialect, LoadOptions{Addrs: t.Addrs, Conns: conns, Pipeline: pl, Duration: d, Warmup: warmup, Seed: 1})
				c.ThisClient = lr.Throughput
			}
			if err == nil && lookErr != nil {
				err = fmt.Errorf("redis-benchmark: %w", lookErr)
			}
			if err == nil {
				var cmd []string
				cmd, err = RedisBenchmarkArgs(t, p)
				if err == nil {
					err = t.Flush(ctx)
				}
				if err == nil {
					n := max(int64(lr.Throughput*d.Seconds()), 10_000)
					c.RedisBenchmark, err = runRedisBenchmark(ctx, bin, t, conns, pl, keys, n, cmd)
				}
			}
			if err != nil {
				c.Err = err.Error()
				r.Progress.Finish("failed: " + shorten(c.Err, 80))
			} else {
				r.Progress.Finish(fmt.Sprintf("this client %s/s, redis-benchmark %s/s", FormatCount(c.ThisClient), FormatCount(c.RedisBenchmark)))
			}
			out = append(out, c)
			if ctx.Err() != nil {
				return out
			}
		}
	}
	return out
}
