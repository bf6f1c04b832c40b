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
	var id uint32
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		id = uint32(len(t.slots))
		t.slots = append(t.slots, ruleSlot{})
	}
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

// checkRule validates a rule and a cost against the engine's bounds. The
// server validates arguments first with nicer messages; this guards the
// replicated path and snapshots.
func (e *Engine) checkRule(r Rule, cost int64) error {
	if cost < 0 && (r.Kind == KindGCRA || r.Kind == KindConcurrency) {
		return badRule("negative cost %d", cost)
	}
	if r.Limit < 1 || r.Period < 1 {
		return badRule("%s limit %d period %d ns: both must be >= 1", r.Kind, r.Limit, r.Period)
	}
	switch r.Kind {
	case KindToken, KindLeaky, KindFixed, KindSliding, KindLog:
		if r.Limit > maxCount {
			return badRule("%s limit %d exceeds 2^53", r.Kind, r.Limit)
		}
		if r.Period > maxPeriod {
			return badRule("%s period %d ns exceeds 366 days", r.Kind, r.Period)
		}
		if cost > maxCount || cost < -maxCount {
			return badRule("cost %d exceeds 2^53", cost)
		}
		if r.Kind == KindLog && r.Limit > e.maxLog {
			return badRule("log limit %d exceeds max-log-limit %d", r.Limit, e.maxLog)
		}
	case KindConcurrency:
		if r.Limit > e.maxLog {
			return badRule("concurrency limit %d exceeds max-log-limit %d", r.Limit, e.maxLog)
		}
		if r.Period > maxPeriod {
			return badRule("lease ttl %d ns exceeds 366 days", r.Period)
		}
		if cost > maxCount {
			return badRule("cost %d exceeds 2^53", cost)
		}
	case KindGCRA:
		if r.Limit > maxGCRASpan/r.Period {
			return badRule("gcra burst %d times interval %d ns exceeds 2^62", r.Limit, r.Period)
		}
		if cost > maxGCRASpan/r.Period {
			return badRule("gcra quantity %d times interval %d ns exceeds 2^62", cost, r.Period)
		}
	default:
		return badRule("unknown limiter kind %d", r.Kind)
	}
	return nil
}
