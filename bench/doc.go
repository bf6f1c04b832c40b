// Package bench is sluice's load generator and benchmark suite.
//
// It starts the servers it measures itself (sluice in memory, sluice durable,
// a durable three-node sluice cluster through internal/testkit/proccluster,
// and redis-server running the Lua scripts in lua/), drives them with a
// pipelined RESP client on internal/respwire (no third-party client on the
// hot path), records every request's latency into a log-bucketed histogram,
// and writes the results as JSON, as Go benchmark lines for benchstat, and
// as a Markdown page with SVG charts, both rendered from the JSON.
//
// The pieces, each in its own file:
//
//   - keys.go, workload.go: key distributions (uniform, Zipf, one hot key);
//     what a request is for each algorithm, spelled for sluice (RL.*) and
//     for Redis (EVALSHA of a script in lua/).
//   - load.go, decision.go, histogram.go: the load loop (N connections,
//     pipeline depth P, warm-up, a duration or a request count), the reader
//     of a reply's decision, the latency histogram.
//   - target.go, route.go, durability.go: starting and stopping the servers;
//     routing by slot; the log store and fsync mode targets.
//   - suite.go, defaults.go: cases run in interleaved rounds (A B A B) and
//     reduced to medians; the default and full suites, and the goals, each
//     declared beside the case that measures it.
//   - memory.go, accuracy.go, calibrate.go, machine.go: memory per key and
//     against the key count, the sliding window counter against the exact
//     log, this client against redis-benchmark, the machine and CPU time.
//   - report.go, markdown.go, chart.go: results.json, bench.txt, the page
//     and its charts.
package bench
