package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability of the zero-refill keys.
//
// With nothing coming back within the run, each of those keys is a counter
// of the units left, and every command on it a step of one sequential
// model: a decision of cost n is allowed exactly when n units are left,
// then takes them; RL.PEEK and COST 0 read. The history of each key must
// be explainable by some order of its ops consistent with real time
// (porcupine searches for one). An op with no known outcome may have
// applied at any time after it was sent, or never: it is given no return
// time (the end of the history) and any reply, so the search may place it
// anywhere after its call, including after everything else (never).

// linInput is one op's call.
type linInput struct {
	peek bool // RL.PEEK
	cost int64
}

// linOutput is one op's reply.
type linOutput struct {
	unknown   bool
	allowed   bool
	remaining int64
	isNil     bool // RL.PEEK of a key at its initial state
}

// counterModel is the sequential specification of a zero-refill key with
// the given limit; the state is the units left.
func counterModel(limit int64) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return limit },
		Step: func(state, input, output any) (bool, any) {
			left := state.(int64)
			in, out := input.(linInput), output.(linOutput)
			if in.peek {
				if out.isNil {
					return left == limit, left
				}
				return out.remaining == left, left
			}
			ok := in.cost <= left
			next := left
			if ok {
				next -= in.cost
			}
			if out.unknown {
				return true, next
			}
			return out.allowed == ok && out.remaining == next, next
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(linInput), output.(linOutput)
			call := fmt.Sprintf("cost %d", in.cost)
			if in.peek {
				call = "RL.PEEK"
			}
			switch {
			case out.unknown:
				return call + " -> ? (no reply)"
			case out.isNil:
				return call + " -> nil"
			}
			return fmt.Sprintf("%s -> allowed=%v remaining=%d", call, out.allowed, out.remaining)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%d left", state.(int64)) },
	}
}

// linOps turns a key's ops into porcupine operations: answered ones as
// they are, unknown decisions with no return, failures and unknown reads
// left out.
func linOps(ops []op, end int64) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range ops {
		in := linInput{peek: o.Peek, cost: o.Cost}
		switch o.Status {
		case stOK:
			out = append(out, porcupine.Operation{ClientId: o.Worker, Input: in, Call: o.Call, Return: o.Return,
				Output: linOutput{allowed: o.Allowed, remaining: o.Remaining, isNil: o.Nil}})
		case stUnknown:
			if o.Peek || o.Cost == 0 {
				continue
			}
			out = append(out, porcupine.Operation{ClientId: o.Worker, Input: in, Call: o.Call, Return: end,
				Output: linOutput{unknown: true}})
		}
	}
	return out
}

// linStats counts the outcome of the linearizability checks.
type linStats struct {
	keys, ok, unknown, illegal int
	ops                        int
	elapsed                    time.Duration
}

// checkLinearizable checks every zero-refill key's history, each within
// perKey and all within budget (a search that runs out of time is
// inconclusive, not a violation). On a violation it writes porcupine's
// visualization to outDir.
func (ch *checker) checkLinearizable(ops []op, outDir string, perKey, budget time.Duration) ([]violation, linStats) {
	var vs []violation
	var st linStats
	start := time.Now()
	groups := byKey(ops)
	var end int64
	for _, o := range ops {
		end = max(end, o.Return)
	}
	end++
	for _, k := range ch.keys {
		if !k.Zero {
			continue
		}
		hist := linOps(groups[k.ID], end)
		if len(hist) == 0 {
			continue
		}
		st.keys++
		st.ops += len(hist)
		timeout := min(perKey, budget-time.Since(start))
		if timeout <= 0 {
			st.unknown++
			continue
		}
		model := counterModel(k.Limit)
		res, info := porcupine.CheckOperationsVerbose(model, hist, timeout)
		switch res {
		case porcupine.Ok:
			st.ok++
		case porcupine.Unknown:
			st.unknown++
		case porcupine.Illegal:
			st.illegal++
			msg := fmt.Sprintf("%d ops admit no linearization", len(hist))
			if outDir != "" {
				path := filepath.Join(outDir, "linearizability-"+strings.NewReplacer(":", "_").Replace(k.Name)+".html")
				if err := porcupine.VisualizePath(model, info, path); err != nil {
					msg += fmt.Sprintf(" (visualization failed: %v)", err)
				} else {
					msg += "; see " + path
				}
			}
			vs = append(vs, violation{Check: "linearizable", Key: k.Name, Msg: msg})
		}
	}
	st.elapsed = time.Since(start)
	return vs, st
}
