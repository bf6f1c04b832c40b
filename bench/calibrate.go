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
	key := MemoryKeyPrefix + "__rand_int__"
	switch d := t.Dialect.(type) {
	case SluiceDialect:
		return append([]string{"RL.TOKEN", key}, SluiceArgs(AlgToken, p)...), nil
	case LuaDialect:
		if d.Anchor {
			return append([]string{"EVALSHA", ScriptSHA(AnchorScript), "1", key}, LuaArgs(AlgToken, p)[:2]...), nil
		}
		return append([]string{"EVALSHA", ScriptSHA("token_bucket.lua"), "1", key}, LuaArgs(AlgToken, p)...), nil
	}
	return nil, fmt.Errorf("no redis-benchmark command for %s", t.Name)
}

// Calibrate measures each target with this tool's client, then with
// redis-benchmark for as many requests as the client answered in d, at
// each pipeline depth.
func (r *Runner) Calibrate(ctx context.Context, targets []string, pipelines []int, conns int, keys uint64, d, warmup time.Duration) []Calibration {
	var out []Calibration
	p := MemoryParams()
	w := Workload{Alg: AlgToken, Keys: keys, Dist: DistUniform, Cost: 1, Prefix: MemoryKeyPrefix, Allow: p, Deny: p}
	for _, pl := range pipelines {
		for _, name := range targets {
			c := Calibration{Target: name, Pipeline: pl, Conns: conns}
			r.step(fmt.Sprintf("client check: %s P%d", name, pl))
			err := func() error {
				t, err := r.Env.Get(ctx, name)
				if err != nil {
					return err
				}
				if err := t.Flush(ctx); err != nil {
					return err
				}
				lr, err := RunLoad(ctx, w, t.Dialect, LoadOptions{Addrs: t.Addrs, Conns: conns, Pipeline: pl, Duration: d, Warmup: warmup, Seed: 1})
				c.ThisClient = lr.Throughput
				if err != nil {
					return err
				}
				cmd, err := RedisBenchmarkArgs(t, p)
				if err != nil {
					return err
				}
				if err := t.Flush(ctx); err != nil {
					return err
				}
				host, port, _ := strings.Cut(t.Addrs[0], ":")
				args := append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(conns), "-P", strconv.Itoa(pl), "-r", strconv.FormatUint(keys, 10),
					"-n", strconv.FormatInt(max(int64(lr.Throughput*d.Seconds()), 10_000), 10), "--csv"}, cmd...)
				out, err := exec.CommandContext(ctx, "redis-benchmark", args...).Output()
				if err != nil {
					return fmt.Errorf("redis-benchmark: %w", err)
				}
				recs, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
				if err != nil || len(recs) < 2 || len(recs[1]) < 2 {
					return fmt.Errorf("redis-benchmark: unexpected output %q", shorten(string(out), 200))
				}
				if c.RedisBenchmark, err = strconv.ParseFloat(recs[1][1], 64); err != nil {
					return fmt.Errorf("redis-benchmark: requests per second %q: %w", recs[1][1], err)
				}
				return nil
			}()
			if err != nil {
				c.Err = err.Error()
				r.note("failed: " + shorten(c.Err, 80))
			} else {
				r.note(fmt.Sprintf("this client %s/s, redis-benchmark %s/s", FormatCount(c.ThisClient), FormatCount(c.RedisBenchmark)))
			}
			out = append(out, c)
			if ctx.Err() != nil {
				return out
			}
		}
	}
	return out
}
