package engine

// ruleTable interns a stripe's rules so an entry stores a uint32. Rules are
// reference counted by the entries using them, so the table never holds more
// rules than the stripe has keys, whatever parameters clients send. Id 0 is
// never used (it marks a free entry).
type ruleTable struct {
	slots []ruleSlot
	ids   map[Rule]uint32
	free  []uint32
	last  uint32 // the id acquire returned last: most keys of a stripe share one rule
}

type ruleSlot struct {
	rule Rule
	refs uint32
}

func (t *ruleTable) get(id uint32) Rule { return t.slots[id].rule }

// acquire returns r's id with one more reference.
func (t *ruleTable) acquire(r Rule) uint32 {
	if id := t.last; int(id) < len(t.slots) {
		if sl := &t.slots[id]; sl.refs > 0 && sl.rule == r {
			sl.refs++
			return id
		}
	}
	if id, ok := t.ids[r]; ok {
		t.slots[id].refs++
		t.last = id
		return id
	}
	if t.ids == nil {
		t.ids = make(map[Rule]uint32)
		t.slots = append(t.slots[:0], ruleSlot{})
	}
	id := slot(&t.slots, &t.free)
	t.slots[id] = ruleSlot{rule: r, refs: 1}
	t.ids[r] = id
	t.last = id
	return id
}

// release drops one reference to id.
func (t *ruleTable) release(id uint32) {
	sl := &t.slots[id]
	sl.refs--
	if sl.refs == 0 {
		delete(t.ids, sl.rule)
		*sl = ruleSlot{}
		t.free = append(t.free, id)
	}
}

// checkRule validates a rule and a cost against the engine's bounds, by
// the rule's kind's row (kinds.go). The server validates arguments first
// with nicer messages; this guards the replicated path and snapshots.
//
// It runs on every decision: the checks below keep their error paths out
// of line, so that what a valid rule runs is inlined into the row's
// function.
func (e *Engine) checkRule(r Rule, cost int64) error {
	return kindOf(r.Kind).checkRule(r, cost, e.maxLog)
}

// positive reports every kind's first check: a limit and a period of at
// least 1.
func positive(r Rule) bool { return r.Limit >= 1 && r.Period >= 1 }

// notPositive is the error of a rule that is not positive.
func notPositive(r Rule) error {
	return badRule("%s limit %d period %d ns: both must be >= 1", r.Kind, r.Limit, r.Period)
}

// refuseRule is the check of KindNone, KindString and of a Kind beyond the
// table: no rule of theirs is valid.
func refuseRule(r Rule, _, _ int64) error {
	if !positive(r) {
		return notPositive(r)
	}
	return badRule("unknown limiter kind %d", r.Kind)
}

// countBounds reports whether the kinds that count units (the bucket,
// window and log kinds) take r and cost: limit, period and a signed cost
// within 2^53 and 366 days. countError says which bound failed.
func countBounds(r Rule, cost int64) bool {
	return positive(r) && r.Limit <= maxCount && r.Period <= maxPeriod && cost <= maxCount && cost >= -maxCount
}

func countError(r Rule, cost int64) error {
	switch {
	case !positive(r):
		return notPositive(r)
	case r.Limit > maxCount:
		return badRule("%s limit %d exceeds 2^53", r.Kind, r.Limit)
	case r.Period > maxPeriod:
		return badRule("%s period %d ns exceeds 366 days", r.Kind, r.Period)
	}
	return badRule("cost %d exceeds 2^53", cost)
}

// checkCountRule is the check of the bucket and window kinds.
func checkCountRule(r Rule, cost, _ int64) error {
	if !countBounds(r, cost) {
		return countError(r, cost)
	}
	return nil
}

// checkLogRule is checkCountRule with the log's limit within maxLog.
func checkLogRule(r Rule, cost, maxLog int64) error {
	if !countBounds(r, cost) {
		return countError(r, cost)
	}
	if r.Limit > maxLog {
		return badRule("log limit %d exceeds max-log-limit %d", r.Limit, maxLog)
	}
	return nil
}

// checkConcurrencyRule: no refunds, at most maxLog units held, a lease ttl
// within 366 days.
func checkConcurrencyRule(r Rule, cost, maxLog int64) error {
	if cost < 0 {
		return badRule("negative cost %d", cost)
	}
	if !positive(r) {
		return notPositive(r)
	}
	if r.Limit > maxLog {
		return badRule("concurrency limit %d exceeds max-log-limit %d", r.Limit, maxLog)
	}
	if r.Period > maxPeriod {
		return badRule("lease ttl %d ns exceeds 366 days", r.Period)
	}
	if cost > maxCount {
		return badRule("cost %d exceeds 2^53", cost)
	}
	return nil
}

// checkGCRARule: no refunds, and the burst and the quantity times the
// interval within 2^62 (gcra.go).
func checkGCRARule(r Rule, cost, _ int64) error {
	if cost < 0 || !positive(r) || r.Limit > maxGCRASpan/r.Period || cost > maxGCRASpan/r.Period {
		return gcraError(r, cost)
	}
	return nil
}

func gcraError(r Rule, cost int64) error {
	switch {
	case cost < 0:
		return badRule("negative cost %d", cost)
	case !positive(r):
		return notPositive(r)
	case r.Limit > maxGCRASpan/r.Period:
		return badRule("gcra burst %d times interval %d ns exceeds 2^62", r.Limit, r.Period)
	}
	return badRule("gcra quantity %d times interval %d ns exceeds 2^62", cost, r.Period)
}
