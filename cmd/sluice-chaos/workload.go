package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/slots"
)

// kind is a limiter algorithm the workload drives.
type kind string

const (
	kindToken   kind = "token"
	kindLeaky   kind = "leaky"
	kindFixed   kind = "fixed"
	kindSliding kind = "sliding"
	kindLog     kind = "log"
)

// commandOf is each kind's command.
func commandOf(k kind) string {
	switch k {
	case kindToken:
		return "RL.TOKEN"
	case kindLeaky:
		return "RL.LEAKY"
	case kindFixed:
		return "RL.FIXED"
	case kindSliding:
		return "RL.SLIDING"
	}
	return "RL.LOG"
}

// day366 is the longest window and the slowest rate (1 per 366 days) the
// grammar takes (engine.MaxPeriod): over a run of minutes, "no refill".
const day366 = time.Duration(engine.MaxPeriod)

// keySpec is one key of the workload and the limit every call on it uses.
type keySpec struct {
	ID    int    `json:"id"`
	Name  string `json:"name"`
	Kind  kind   `json:"kind"`
	Limit int64  `json:"limit"`
	// Period: for token and leaky, one unit per Period (the emission
	// interval); for fixed, sliding and log, the window.
	Period time.Duration `json:"period"`
	// Zero: nothing comes back within the run (a 366-day window or a rate
	// of 1 per 366 days), so every admission is final: the key's history
	// must be linearizable against a counter.
	Zero bool `json:"zero"`
	Gen  int  `json:"gen"`
	// Group is the Raft group owning the key's slot (0 with one group).
	Group int `json:"group"`
}

// param renders Period as the command's rate or window argument.
func (k *keySpec) param() string {
	d := k.Period
	var s string
	if d%(24*time.Hour) == 0 {
		s = strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	} else {
		s = strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	if k.Kind == kindToken || k.Kind == kindLeaky {
		return "1/" + s
	}
	return s
}

// decideArgs is the key's command with the given cost.
func (k *keySpec) decideArgs(cost int64) []string {
	return []string{commandOf(k.Kind), k.Name, strconv.FormatInt(k.Limit, 10), k.param(),
		"COST", strconv.FormatInt(cost, 10)}
}

// keyTemplate is a key of every generation.
type keyTemplate struct {
	name   string
	kind   kind
	limit  int64 // 0: the zero-refill capacity, sized from the rate
	period time.Duration
	zero   bool
}

// keyTemplates are the keys of a generation. Refill keys are saturated by
// the clients (their demand is far above the rate), so an over-admission
// shows as admissions above the bound; zero-refill keys are the
// linearizable counters.
func keyTemplates() []keyTemplate {
	return []keyTemplate{
		{name: "lin-token", kind: kindToken, period: day366, zero: true},
		{name: "lin-token-small", kind: kindToken, limit: 20, period: day366, zero: true},
		{name: "lin-fixed", kind: kindFixed, period: day366, zero: true},
		{name: "lin-log", kind: kindLog, period: day366, zero: true},
		{name: "rate-token", kind: kindToken, limit: 20, period: 200 * time.Millisecond},
		{name: "rate-leaky", kind: kindLeaky, limit: 20, period: 200 * time.Millisecond},
		{name: "rate-fixed", kind: kindFixed, limit: 40, period: 5 * time.Second},
		{name: "rate-sliding", kind: kindSliding, limit: 40, period: 5 * time.Second},
		{name: "rate-log", kind: kindLog, limit: 40, period: 5 * time.Second},
	}
}

// workload hands out the next request: keys come in generations of genEvery,
// so that each key's history is a bounded stretch of the run with its own
// faults, and fresh buckets keep arriving.
type workload struct {
	genEvery time.Duration
	zeroCap  int64
	noFixed  bool        // a 366-day window boundary falls within the run
	table    slots.Table // the slot ranges of the cluster's Raft groups

	mu   sync.Mutex
	keys []*keySpec
	gens map[int][]*keySpec
}

// newWorkload sizes the zero-refill capacity so that a key lasts about a
// generation at the given total rate, and drops the 366-day fixed window if
// one of its (epoch-aligned) boundaries falls within the run. The keys are
// spread over the given number of Raft groups.
func newWorkload(genEvery time.Duration, rate int, start time.Time, runFor time.Duration, groups int) (*workload, error) {
	table, err := slots.Even(groups)
	if err != nil {
		return nil, err
	}
	w := &workload{genEvery: genEvery, gens: map[int][]*keySpec{}, table: table}
	zeroKeys := int64(0)
	for _, t := range keyTemplates() {
		if t.zero {
			zeroKeys++
		}
	}
	// Half the requests go to zero-refill keys, about 1.3 units each.
	w.zeroCap = max(20, int64(float64(rate)*genEvery.Seconds()*0.5/float64(zeroKeys)*0.9))
	now := start.UnixNano()
	next := (now/int64(day366) + 1) * int64(day366)
	w.noFixed = time.Duration(next-now) < runFor+time.Hour
	return w, nil
}

// keyName names key i (the i-th of generation g) so that it lands in group
// (i + g) mod groups: over the generations every kind of key visits every
// group, and as the zero-refill keys come first, with at most 3 groups
// every generation gives every group zero-refill and refill keys (with up
// to 8, keys; with more, the generations take turns). The name is
// "chaos:g<g>:<template>", with "~<n>" appended for the smallest n that
// puts it in its group when the plain name does not; with one group, the
// plain name.
func (w *workload) keyName(g, i int, template string) (string, int) {
	base := fmt.Sprintf("chaos:g%d:%s", g, template)
	want := (i + g) % w.table.Groups()
	name := base
	for n := 1; ; n++ {
		if got := w.table.Group(slots.Of([]byte(name))); got == want {
			return name, got
		}
		name = base + "~" + strconv.Itoa(n)
	}
}

// generation returns the keys of generation g, creating them on first use.
func (w *workload) generation(g int) []*keySpec {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ks, ok := w.gens[g]; ok {
		return ks
	}
	var ks []*keySpec
	for _, t := range keyTemplates() {
		if w.noFixed && t.zero && t.kind == kindFixed {
			continue
		}
		i := len(ks)
		limit := t.limit
		if limit == 0 {
			limit = w.zeroCap
		}
		name, group := w.keyName(g, i, t.name)
		k := &keySpec{ID: len(w.keys), Name: name, Kind: t.kind,
			Limit: limit, Period: t.period, Zero: t.zero, Gen: g, Group: group}
		w.keys = append(w.keys, k)
		ks = append(ks, k)
	}
	w.gens[g] = ks
	return ks
}

// allKeys returns every key created so far.
func (w *workload) allKeys() []*keySpec {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*keySpec(nil), w.keys...)
}

// request is one call the workload makes.
type request struct {
	key  *keySpec
	peek bool // RL.PEEK rather than the key's command
	cost int64
}

// args renders the request.
func (r request) args() []string {
	if r.peek {
		return []string{"RL.PEEK", r.key.Name}
	}
	return r.key.decideArgs(r.cost)
}

// next picks a request at elapsed time since the start: half on
// zero-refill keys, half on refill keys; 5% RL.PEEK, 10% COST 0, else a
// cost of 1 to 3.
func (w *workload) next(rng *rand.Rand, elapsed time.Duration) request {
	ks := w.generation(int(elapsed / w.genEvery))
	var zero, refill []*keySpec
	for _, k := range ks {
		if k.Zero {
			zero = append(zero, k)
		} else {
			refill = append(refill, k)
		}
	}
	pool := refill
	if rng.IntN(2) == 0 {
		pool = zero
	}
	r := request{key: pool[rng.IntN(len(pool))]}
	switch p := rng.IntN(100); {
	case p < 5:
		r.peek = true
	case p < 15:
		r.cost = 0
	case p < 75:
		r.cost = 1
	case p < 93:
		r.cost = 2
	default:
		r.cost = 3
	}
	return r
}
