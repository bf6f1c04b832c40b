// Package bench is sluice's load generator and benchmark suite.
//
// It starts the servers it measures itself (every sluice target, in memory,
// durable, or durable three-node clusters, through
// internal/testkit/proccluster, and redis-server running the Lua scripts in
// lua/), drives them with a
// pipelined RESP client on internal/respwire, records every request's
// latency, and writes the results as JSON, as Go benchmark lines for
// benchstat, and as a Markdown page with SVG charts, both rendered from the
// JSON.
//
// The pieces, each in its own file:
//
//   - cases.go: the suite, one table of cases with the goals each
//     measures; suite.go: cases run in interleaved rounds (A B A B) and
//     reduced to medians.
//   - workload.go, keys.go: what a request is for each algorithm, spelled
//     for sluice (RL.*) and for Redis (EVALSHA of a script in lua/); key
//     distributions (uniform, Zipf, one hot key).
//   - load.go, latency.go: the load loop (N connections, pipeline depth P,
//     warm-up, a duration or a request count) and its reply reader; the
//     latencies' percentiles.
//   - target.go, cluster.go: starting and stopping the servers; the sluice
//     targets (log stores and fsync modes) and the counters a load reads
//     at both ends of its measured phase (CPU time, group commit).
//   - memory.go, machine.go: memory per key and against the key count,
//     the machine and CPU time.
//   - report.go, benchmarks.md.tmpl, bench.txt.tmpl, chart.go:
//     results.json, the page, bench.txt and the charts. The page's
//     accuracy section (the sliding window counter against the exact log)
//     is engine's BenchmarkSlidingAccuracy, parsed out of the engine
//     benchmark text (-engine-bench).
package bench
