package engine

import (
	"bytes"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/sluice-rl/sluice/internal/errcode"
)

// OpRateLimit: one request of Envoy's rate limit service, decided at one
// instant over all its descriptors (SPEC section 12). It is RL.ALL's
// machinery (all.go: the locks of every stripe its keys fall in, taken in
// ascending order and held while it evaluates and charges, the room for new
// keys checked for the whole call before anything is charged) with three
// differences that Envoy's requests need:
//
//   - A key may repeat: Envoy may send the same descriptor twice, and
//     envoyproxy/ratelimit charges it twice. Occurrence j of a key is
//     evaluated with the cost of the earlier charged occurrences of that key
//     plus its own (as if they had been charged one after the other), and
//     the key is charged once with the sum.
//   - Shadow limits (bit i of the op's mask) never deny the request: one
//     without room is reported as such and left uncharged.
//   - A limit of 0 (requests_per_unit: 0) denies every positive cost and
//     touches no key.
//
// The request is allowed unless an enforced limit denies it; then nothing
// changes at all, and the limits that had room report their state as it
// stands (uncharged), as RL.ALL's do.

// rateLimit runs an OpRateLimit at now; room, when large enough, holds the
// per-limit results.
func (e *Engine) rateLimit(now int64, lims []Limit, shadow uint64, room []Result) Result {
	if len(lims) == 0 || len(lims) > MaxAll {
		return Result{Err: badRule("%d limits in a rate limit request: must be 1 to %d", len(lims), MaxAll)}
	}
	var k allKeys
	var first [MaxAll]uint8 // first[i]: the index of the first limit with lims[i]'s key
	for i := range lims {
		l := &lims[i]
		if !l.Rule.Kind.Layerable() {
			return Result{Err: badRule("a rate limit request takes no %s limit", l.Rule.Kind)}
		}
		r := l.Rule
		if r.Limit == 0 {
			r.Limit = 1 // a zero limit is checked as any other, then never evaluated
		}
		if err := e.checkRule(r, l.Cost); err != nil {
			return Result{Err: err}
		}
		h := xxhash.Sum64(l.Key)
		k.h[i] = h
		first[i] = uint8(i)
		for j := 0; j < i; j++ {
			if k.h[j] == h && bytes.Equal(lims[j].Key, l.Key) {
				first[i] = first[j]
				break
			}
		}
		k.addStripe(uint32(h & e.mask))
	}
	var res Result
	e.lockAll(&k)
	e.rateLimitLocked(now, lims, shadow, &k, &first, room, &res)
	if res.Err == errNoRoom {
		e.unlockAll(&k)
		e.reclaimAll(now)
		e.lockAll(&k)
		e.setFinal(&k, true)
		e.rateLimitLocked(now, lims, shadow, &k, &first, room, &res)
		e.setFinal(&k, false)
	}
	e.unlockAll(&k)
	return res
}

// rlScratch is rateLimitLocked's room for a request of up to rlSmall
// limits, on the stack; a larger one allocates its own.
type rlScratch struct {
	cum     [rlSmall]int64
	rule    [rlSmall]Rule
	charges [rlSmall]Limit
	commits [rlSmall]commit
	occ     [rlSmall]commit
	last    [rlSmall]uint8
}

const rlSmall = 4

// rateLimitLocked is OpRateLimit with its stripes locked.
func (e *Engine) rateLimitLocked(now int64, lims []Limit, shadow uint64, k *allKeys, first *[MaxAll]uint8, room []Result, res *Result) {
	var each []Result
	if cap(room) >= len(lims) {
		each = room[:len(lims):len(lims)]
	} else {
		each = make([]Result, len(lims))
	}
	// cum[f]: the cost charged so far to the key first seen at f; rule[f]
	// the rule it is charged with (the largest limit among its charged
	// occurrences, under which every one of them fits).
	// Scratch sized for the usual few descriptors: zeroing room for
	// MaxAll limits on every call cost more than deciding three.
	var small rlScratch
	var cum []int64
	var rule []Rule
	var charges []Limit
	var commits, occ []commit // per charge; per occurrence, as evaluated
	var last []uint8          // last[f]: the last charged occurrence of key f
	if n := len(lims); n <= rlSmall {
		cum, rule, charges, commits = small.cum[:n], small.rule[:n], small.charges[:n], small.commits[:n]
		occ, last = small.occ[:n], small.last[:n]
	} else {
		cum, rule, charges, commits = make([]int64, n), make([]Rule, n), make([]Limit, n), make([]commit, n)
		occ, last = make([]commit, n), make([]uint8, n)
	}
	denied := false
	for i := range lims {
		l := &lims[i]
		isShadow := shadow&(1<<uint(i)) != 0
		if l.Rule.Limit == 0 {
			each[i] = Result{Kind: l.Rule.Kind, Allowed: l.Cost <= 0}
			denied = denied || (!each[i].Allowed && !isShadow)
			continue
		}
		f := first[i]
		c := cum[f] + l.Cost
		if err := e.checkRule(l.Rule, c); err != nil {
			*res = Result{Err: err}
			return
		}
		s := e.stripes[k.h[i]&e.mask]
		if err := s.evalOnly(now, hiHash(k.h[i]), l.Key, l.Rule, c, &occ[i], &each[i]); err != nil {
			*res = Result{Err: fmt.Errorf("rate limit key %q: %w", l.Key, err)}
			return
		}
		switch {
		case each[i].Allowed:
			cum[f] = c
			last[f] = uint8(i)
			if rule[f].Kind == KindNone || l.Rule.Limit > rule[f].Limit {
				rule[f] = l.Rule
			}
		case !isShadow:
			denied = true
		}
	}
	if denied {
		for i := range lims {
			l := &lims[i]
			if !each[i].Allowed || l.Rule.Limit == 0 {
				continue
			}
			s := e.stripes[k.h[i]&e.mask]
			_ = s.evalOnly(now, hiHash(k.h[i]), l.Key, l.Rule, 0, nil, &each[i])
			each[i].Allowed, each[i].RetryAfter = true, 0
		}
		*res = Result{Allowed: false, Time: now, Each: each}
		return
	}
	// The charges: one per distinct key with an allowed occurrence, in
	// first-seen order.
	var ck allKeys
	n := 0
	for i := range lims {
		// A key whose charged total is 0 (peeks) still goes through the
		// commit, as RL.ALL's cost-0 limits do: a peek writes back the
		// brought-forward state and reclaims a dead entry.
		if int(first[i]) != i || rule[i].Kind == KindNone {
			continue
		}
		charges[n] = Limit{Key: lims[i].Key, Rule: rule[i], Cost: cum[i]}
		ck.h[n] = k.h[i]
		if j := last[i]; lims[j].Rule == rule[i] {
			// The last charged occurrence was evaluated with this rule
			// and this total: its commit is the charge's (the usual
			// case, a key met once).
			commits[n] = occ[j]
		} else {
			var tmp Result
			commits[n] = commit{}
			s := e.stripes[k.h[i]&e.mask]
			if err := s.evalOnly(now, hiHash(k.h[i]), lims[i].Key, rule[i], cum[i], &commits[n], &tmp); err != nil {
				*res = Result{Err: err}
				return
			}
		}
		n++
	}
	if err := e.allRoom(now, charges[:n], &ck, commits[:n]); err != nil {
		*res = Result{Err: err}
		return
	}
	if j, r := e.charge(now, charges[:n], ck.h[:n], k, commits[:n], nil); j >= 0 {
		*res = Result{Err: &errcode.Error{Code: errcode.Internal, Detail: fmt.Sprintf("rate limit charge of %q refused (%v) after it was evaluated", charges[j].Key, r.Err)}}
		return
	}
	*res = Result{Allowed: true, Time: now, Each: each}
}
