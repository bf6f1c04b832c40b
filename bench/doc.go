// Package bench is sluice's load generator and benchmark suite.
//
// It starts the servers it measures itself (sluice in memory, sluice durable,
// a durable three-node sluice cluster, and redis-server running the Lua
// scripts in lua/), drives them with a minimal pipelined RESP client of its
// own (no third-party client on the hot path), records every request's
// latency into a log-bucketed histogram, and writes a Markdown report with
// SVG charts.
//
// The pieces, each in its own file:
//
//   - histogram.go: the latency histogram (HDR-style, about 0.8% relative error).
//   - client.go: the RESP client: commands are appended to a buffer, written
//     in one syscall per batch, and replies parsed without allocation.
//   - keys.go: key distributions (uniform, Zipf, one hot key).
//   - workload.go: what a request is for each algorithm, and how it is spelled
//     for sluice (RL.*) and for Redis (EVALSHA of a script in lua/).
//   - load.go: the load loop: N connections, pipeline depth P, warm-up, a
//     duration or a request count.
//   - target.go: starting and stopping the servers on free 127.0.0.1 ports.
//   - suite.go: cases run in interleaved rounds (A B A B) and reduced to medians.
//   - defaults.go: the default suite (make bench) and the full one.
//   - memory.go, accuracy.go: resident memory per live key and against the
//     number of keys, and the sliding window counter's decisions against
//     the exact sliding log.
//   - calibrate.go: this client against redis-benchmark on the same servers.
//   - machine.go: the machine's description and how busy other processes
//     kept it; CPU time per request.
//   - report.go, svg.go: the Markdown tables and the charts.
package bench
