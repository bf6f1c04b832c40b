// Package forward is how a follower runs a command: it forwards the
// batch to the leader's forward port. This file holds the protocol (its
// frames are cluster/peer's); server.go the leader's side, client.go the
// follower's pool. A try's result is an outcome.Attempt (cluster/outcome),
// the same as the group commit's; Submitter is what both take a try
// through.
//
// Every node listens on its forward address (ForwardAddr, by default the
// Raft port + 1000), a dedicated listener, so that the RESP server knows
// nothing of it. A leader announces that address through the log after its
// barrier; followers read it from the FSM. A follower keeps a small pool of
// connections (ForwardConns) to the current leader and sends each Execute
// call as one request frame, whole pipelines included; concurrent calls on
// one connection are coalesced into one write by its writer goroutine, and
// the leader feeds them to its group commit in the order they arrive.
// Replies carry the request's id and are matched to it, so no reply can
// reach the wrong caller.
//
// Wire format, after the client's 5-byte hello "SLFW\x03":
//
//	frame    = uvarint length | payload
//	request  = uvarint id | uvarint timeout (ms) | batch id (16 bytes) | ops (see cluster/codec)
//	response = uvarint id | status byte | body
//	status   = 0 ok (body: results) | 1 error (body: error, its code)
//	         | 2 not applied, route again (body: error, the reason)
//
// Results and errors carry error codes (internal/errcode;
// codec.AppendError), never reply texts. A request without ops is a ping,
// answered at once with status 0.
//
// Versions: "SLFW\x01" sent no batch ids and error texts, "SLFW\x02" sent
// batch ids and error texts; a leader refuses both (the follower's requests
// fail, and it answers CLUSTERDOWN), so all nodes of a cluster must be
// upgraded together.
//
// Outcome (cluster/outcome). A request that was never written, or that the leader answers
// with status 2, was not applied: the follower routes it again (a new
// leader, a later try) within its deadline. A request written on a
// connection that then breaks may have been applied: the follower sends it
// again, with the same batch id, on a new connection, while its deadline
// allows, and the FSM applies a batch id at most once (cluster/dedup.go).
// When no try is answered in time the reply is UNCERTAIN.
//
// Connections cannot get stuck (cluster/peer): every call has a deadline,
// a call that times out after it was written drops its connection (it may
// sit behind TCP's retransmission backoff, which after a long partition
// lasts tens of seconds), writes have a deadline, and a pooled connection
// that has heard nothing for a while is pinged before it is used.
//
// Coalescing. Each side has one writer per connection, which writes every
// frame queued and then flushes: one write system call (and one read at
// the other end) per flush. Calls and responses arrive in bursts (an
// entry commits and its waiter wakes the callers of dozens of requests at
// once, and those callers send their next commands) but one goroutine at
// a time, so a writer that flushed as soon as its queue was empty wrote
// about one frame per system call. Before it flushes, a writer that found
// its queue empty yields the processor once (runtime.Gosched), so that
// the goroutines already runnable queue theirs first; when none is, the
// yield returns at once. cluster's BenchmarkClusterThreeNodesForwarded
// (wal): ~1 frame per flush before at both ends, 10-20 after.
//
// The forward port is as trusted as the Raft port: bind both to a private
// network.
package forward

import (
	"context"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/outcome"
	"github.com/sluice-rl/sluice/engine"
)

// Submitter takes one try of a batch: the group commit of the node that
// leads (cluster's batcher) or the leader's forward port (Client). The
// try ends by the deadline's firing or ctx's end at the latest.
type Submitter interface {
	Submit(ctx context.Context, deadline <-chan time.Time, b Batch) outcome.Attempt
}

// Batch is one try of an Execute call's batch.
type Batch struct {
	// ID: given at the first forward (Client.NewBatchID) and kept by every
	// later try, so that the log applies the batch at most once; zero for
	// a batch never forwarded.
	ID      codec.BatchID
	Ops     []engine.Op
	Results []engine.Result // filled when the attempt is done without error
	// Addr is the leader's forward address (forwarding only).
	Addr string
	// Until is the call's deadline, which the leader is told.
	Until time.Time
}

const (
	// Hello opens a forwarding connection.
	Hello = "SLFW\x03"
	// GroupHello, then the group as a uvarint, opens a connection of a
	// Raft group other than 0 on a host with several (cluster's
	// groupmux.go): the forwarding, control channel (cluster's control.go)
	// or legacy (legacy.go) hello follows. A connection without it is
	// group 0's.
	GroupHello = "SLFG\x01"
	// The status byte of a response (the control channel's replies use
	// the same).
	StatusOK    = 0
	StatusError = 1
	StatusRetry = 2
	// MaxRequest bounds a request frame (a client pipeline; the RESP
	// server caps a client's query buffer far below this).
	MaxRequest = 64 << 20
	// MaxResponse bounds a response frame (KEYS on a large keyspace).
	MaxResponse = 1 << 30
	// DialTimeout bounds a dial of the forward port.
	DialTimeout = time.Second
)

// ResendWindow bounds how long after its Execute began a follower
// re-sends a batch whose connection broke after it was written: well
// within the FSM's dedupWindow (cluster's dedup.go), even with leaders'
// clocks seconds apart.
const ResendWindow = 10 * time.Second
