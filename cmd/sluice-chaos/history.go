package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// status is what a request's outcome is known to be.
type status uint8

const (
	// stOK: a reply came; its fields are the outcome.
	stOK status = iota
	// stFail: an error after which the command certainly did not apply
	// (LOADING, CLUSTERDOWN, maxclients). The checks hold sluice to it: a
	// failed decision that turns out applied breaks the ledger and
	// linearizability checks.
	stFail
	// stUnknown: no reply (timeout, broken connection), or an error after
	// which the command may still apply (UNCERTAIN).
	stUnknown
	// stUnexpected: a reply the workload can never get (WRONGTYPE, a
	// syntax error, a malformed reply): a violation in itself.
	stUnexpected
)

func (s status) String() string {
	return [...]string{"ok", "fail", "unknown", "unexpected"}[s]
}

// MarshalText renders the status in the history file.
func (s status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// op is one recorded request: who sent it where, when, and what came back.
// Call and Return are nanoseconds since the run's start on the monotonic
// clock; the run's wall-clock start turns them into wall time.
type op struct {
	Worker     int    `json:"worker"`
	Node       int    `json:"node"`
	Key        int    `json:"key"`
	Peek       bool   `json:"peek,omitempty"`
	Cost       int64  `json:"cost"`
	Call       int64  `json:"call"`
	Return     int64  `json:"return"`
	Status     status `json:"status"`
	Allowed    bool   `json:"allowed,omitempty"`
	Limit      int64  `json:"limit,omitempty"`
	Remaining  int64  `json:"remaining,omitempty"`
	RetryAfter int64  `json:"retry_after,omitempty"`
	ResetAfter int64  `json:"reset_after,omitempty"`
	Nil        bool   `json:"nil,omitempty"` // RL.PEEK of a key without state
	Err        string `json:"err,omitempty"`
}

// admits is the units an acknowledged decision admitted.
func (o *op) admits() int64 {
	if o.Status == stOK && !o.Peek && o.Allowed {
		return o.Cost
	}
	return 0
}

// mayAdmit is the units a decision may have admitted, acknowledged or not.
func (o *op) mayAdmit() int64 {
	switch {
	case o.Peek:
		return 0
	case o.Status == stOK:
		return o.admits()
	case o.Status == stUnknown:
		return o.Cost
	}
	return 0
}

// remaining is the units left after the op, as its reply says (an RL.PEEK
// nil is a key at its initial state: all of its limit).
func (o *op) remaining(k *keySpec) int64 {
	if o.Nil {
		return k.Limit
	}
	return o.Remaining
}

// classify fills o from the reply or error of its request.
func classify(o *op, k *keySpec, r respwire.Value, err error) {
	switch {
	case err != nil:
		o.Status, o.Err = stUnknown, err.Error()
	case r.Error() != "":
		o.Err = r.Error()
		switch {
		case strings.HasPrefix(o.Err, "LOADING "),
			strings.HasPrefix(o.Err, "CLUSTERDOWN "),
			strings.HasPrefix(o.Err, "ERR max number of clients"):
			o.Status = stFail
		case strings.HasPrefix(o.Err, "UNCERTAIN "):
			o.Status = stUnknown
		default:
			o.Status = stUnexpected
		}
	case o.Peek && r.IsNull():
		o.Status, o.Nil = stOK, true
	default:
		v, ok := r.Ints()
		if !ok || len(v) != 5 || (v[0] != 0 && v[0] != 1) || v[1] != k.Limit {
			o.Status, o.Err = stUnexpected, "malformed reply "+r.String()
			return
		}
		o.Status = stOK
		o.Allowed = v[0] == 1
		o.Limit, o.Remaining, o.RetryAfter, o.ResetAfter = v[1], v[2], v[3], v[4]
	}
}

// recorder collects the history.
type recorder struct {
	mu  sync.Mutex
	ops []op
}

func (r *recorder) add(o op) {
	r.mu.Lock()
	r.ops = append(r.ops, o)
	r.mu.Unlock()
}

// history returns a copy of the ops so far.
func (r *recorder) history() []op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]op(nil), r.ops...)
}

// writeHistory writes one JSON object per line: the run's wall-clock start
// (the zero of every Call and Return), the keys, then the ops.
func writeHistory(path string, startWall int64, keys []*keySpec, ops []op) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	if err := enc.Encode(map[string]any{"start_unix_ns": startWall}); err != nil {
		f.Close()
		return fmt.Errorf("write history: %w", err)
	}
	for _, k := range keys {
		if err := enc.Encode(map[string]any{"key": k}); err != nil {
			f.Close()
			return fmt.Errorf("write history: %w", err)
		}
	}
	for i := range ops {
		if err := enc.Encode(&ops[i]); err != nil {
			f.Close()
			return fmt.Errorf("write history: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write history: %w", err)
	}
	return f.Close()
}

// worker is one client: a connection to one node, requests paced to one
// every pace, each recorded with its send and reply times.
type worker struct {
	id      int
	node    int
	addr    string
	pace    time.Duration
	timeout time.Duration
	rng     *rand.Rand
	wl      *workload
	rec     *recorder
	start   time.Time // the run's start, on the monotonic clock
}

// run sends requests until ctx ends. A request that cannot be sent (no
// connection) is not recorded; one whose connection fails is unknown, and
// the connection is dialed again.
func (w *worker) run(ctx context.Context) {
	t := time.NewTicker(w.pace)
	defer t.Stop()
	var conn *respwire.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn == nil {
			c, err := dialRESP(w.addr, 500*time.Millisecond)
			if err != nil {
				continue
			}
			conn = c
		}
		req := w.wl.next(w.rng, time.Since(w.start))
		o := op{Worker: w.id, Node: w.node, Key: req.key.ID, Peek: req.peek, Cost: req.cost}
		o.Call = int64(time.Since(w.start))
		r, err := conn.Do(w.timeout, req.args()...)
		o.Return = int64(time.Since(w.start))
		classify(&o, req.key, r, err)
		if err != nil {
			conn.Close()
			conn = nil
		}
		w.rec.add(o)
		if o.Status != stOK {
			// Back off a little, as a client does after an error, rather
			// than pile up requests of unknown outcome.
			_ = sleepCtx(ctx, time.Duration(50+w.rng.IntN(200))*time.Millisecond)
		}
	}
}
