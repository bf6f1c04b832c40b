package engine

import (
	"fmt"
	"math"
	"slices"
)

// ExportStripe returns a consistent copy, taken under stripe i's lock, of its
// keys' records, leaving out states back at their initial state at now
// (with limits set, at now down to the whole second: memory.go). The
// records own their bytes. The words are the stored state: see Record and the
// state comment of each kind (bucket.go, window.go, gcra.go, log.go).
func (e *Engine) ExportStripe(i int, now int64) []Record {
	n := len(e.stripes)
	if i < 0 || i >= n*NumDBs || e.dbs == nil {
		return nil
	}
	d := e.dbs[i/n].Load()
	if d == nil {
		return nil
	}
	return d.exportStripe(i%n, e.countedAt(now))
}

// exportStripe returns the records of this database's stripe i at now
// (already the counted time: memory.go), taking its lock (none on a
// script's view, which holds them all).
func (e *Engine) exportStripe(i int, now int64) []Record {
	s := e.stripes[i]
	e.lk(s)
	defer e.unlk(s)
	recs := make([]Record, 0, s.count.Load())
	s.walkAll(func(idx uint32, ent *entry) {
		if rec, ok := s.record(idx, ent, now); ok {
			recs = append(recs, rec)
		}
	})
	return recs
}

// ExportShards is the number of shards ExportStripe takes: every stripe of
// every database, database by database (NumStripes per database).
func (e *Engine) ExportShards() int { return len(e.stripes) * NumDBs }

// record returns the record of entry idx at now, if it is live. The
// caller holds s.mu.
func (s *stripe) record(idx uint32, ent *entry, now int64) (Record, bool) {
	_, rule, _, live := s.liveState(ent, now)
	if !live {
		return Record{}, false
	}
	rec := Record{Key: slices.Clone(s.keyOf(ent)), Rule: rule, DB: s.db}
	switch kinds[rule.Kind].shape {
	case inLog:
		ring := &s.logs.rings[ent.a]
		rec.Log = make([]int64, ring.n)
		for j := range rec.Log {
			rec.Log[j] = ring.at(j)
		}
	case inLeases:
		ls := &s.leases.sets[ent.a]
		rec.Leases = make([]Lease, 0, ls.n)
		ls.each(ls.root, func(l *lease) {
			if l.expiry > now {
				rec.Leases = append(rec.Leases, Lease{Token: []byte(l.token), Units: l.units, Expiry: l.expiry})
			}
		})
	case inValue:
		rec.A = ent.a
		rec.Value = slices.Clone(s.strValue(idx))
	case inColl:
		rec.A = ent.a
		exportColl(s.colls.objs[ent.b], &rec)
	default:
		rec.A, rec.B, rec.C = ent.a, ent.b, ent.c
	}
	return rec, true
}

// exportKeyTo is exportKey for a script's before-image: a string's key
// and value are appended to buf (the tx's keyBuf, reset each run), not
// allocated, and the record points into the returned buf. Import copies
// what it restores, so the images need live only until the run ends.
func (e *Engine) exportKeyTo(buf, key []byte, now int64) (Record, []byte, bool) {
	now = e.countedAt(now)
	hi, s := e.lock(key)
	defer e.unlk(s)
	_, idx, ok := s.find(hi, key)
	if !ok {
		return Record{}, buf, false
	}
	ent := s.entry(idx)
	if _, rule, _, live := s.liveState(ent, now); live && kinds[rule.Kind].shape == inValue {
		k := len(buf)
		buf = append(buf, s.keyOf(ent)...)
		v := len(buf)
		buf = append(buf, s.strValue(idx)...)
		// As record's: the key, rule, database, a and the value.
		return Record{Key: buf[k:v:v], Rule: rule, DB: s.db, A: ent.a, Value: buf[v:len(buf):len(buf)]}, buf, true
	}
	rec, ok := s.record(idx, ent, now)
	return rec, buf, ok
}

// Import adds one record (on snapshot restore), replacing any state the key
// has. It validates the rule and the state words and returns an
// error matching ErrBadRule, changing nothing, for anything the engine could
// not have produced; it never panics. A record at its initial state is
// accepted and simply adds nothing.
func (e *Engine) Import(rec Record) error {
	if e.nolock {
		// A script's view restores its own database's records (the
		// script's undo), under the locks the script holds.
		return e.importRecord(rec)
	}
	d := e.top.db(rec.DB)
	if d == nil {
		return fmt.Errorf("import key %q: %w", rec.Key, badRule("database %d", rec.DB))
	}
	return d.importRecord(rec)
}

// importRecord is Import into this database.
func (e *Engine) importRecord(rec Record) error {
	shape := kindOf(rec.Rule.Kind).shape
	if shape == inValue {
		return e.importString(rec)
	}
	if shape == inColl {
		return e.importColl(rec)
	}
	if len(rec.Elems) != 0 || len(rec.Scores) != 0 {
		return fmt.Errorf("import key %q: %w", rec.Key, badRule("elements given for a %s key", rec.Rule.Kind))
	}
	if len(rec.Value) != 0 {
		return fmt.Errorf("import key %q: %w", rec.Key, badRule("a value given for a %s key", rec.Rule.Kind))
	}
	if err := e.checkRule(rec.Rule, 0); err != nil {
		return fmt.Errorf("import key %q: %w", rec.Key, err)
	}
	if err := checkRecord(&rec, e.maxLog); err != nil {
		return fmt.Errorf("import key %q: %w", rec.Key, err)
	}
	hi, s, pos := e.lockCleared(rec.Key)
	defer e.unlk(s)
	st := state{rec.A, rec.B, rec.C}
	if shape == inLeases {
		if len(rec.Leases) == 0 {
			return nil
		}
		id := s.leases.alloc()
		s.insert(pos, hi, rec.Key, rec.Rule, state{a: int64(id)})
		ls := &s.leases.sets[id]
		for _, l := range rec.Leases {
			ls.add(l.Token, l.Units, l.Expiry)
			s.leases.count++
			s.leases.tokenBytes += int64(len(l.Token))
		}
		s.reclaimedAt = math.MinInt64
		s.account()
		return nil
	}
	if shape == inLog {
		if len(rec.Log) == 0 {
			return nil
		}
		ent := s.entry(s.insertLog(pos, hi, rec.Key, rec.Rule))
		ring := &s.logs.rings[ent.a]
		ring.buf = slices.Clone(rec.Log)
		ring.n = len(rec.Log)
		s.logs.ts += int64(ring.n)
		s.reclaimedAt = math.MinInt64
		s.account()
		return nil
	}
	if initial(&st, rec.Rule.Kind, st.a) && rec.Rule.Kind != KindGCRA {
		return nil
	}
	s.insert(pos, hi, rec.Key, rec.Rule, st)
	s.reclaimedAt = math.MinInt64
	return nil
}

// lockCleared returns key's hash and its stripe, locked, with whatever
// the key held removed, and the key's miss position there: Import puts a
// record in the key's place.
func (e *Engine) lockCleared(key []byte) (hi uint32, s *stripe, pos uint32) {
	hi, s = e.lock(key)
	if p, idx, ok := s.find(hi, key); ok {
		s.remove(p, idx)
	}
	pos, _, _ = s.find(hi, key)
	return hi, s, pos
}

// checkRecord validates a record's state against its (valid) rule: the
// record's shape is its kind's (kinds.go), and the state words are checked
// by the kind's checkState. A log may hold more timestamps than a lowered
// limit, never more than maxLog.
func checkRecord(rec *Record, maxLog int64) error {
	r := rec.Rule
	k := kindOf(r.Kind)
	if k.shape != inLog && len(rec.Log) != 0 {
		return badState(rec, "timestamps given for a kind without a log")
	}
	if k.shape != inLeases && len(rec.Leases) != 0 {
		return badState(rec, "leases given for a kind without leases")
	}
	switch k.shape {
	case inWords:
		return k.checkState(rec)
	case inLog:
		if rec.A != 0 || rec.B != 0 || rec.C != 0 {
			return badState(rec, "state words set for a log")
		}
		if int64(len(rec.Log)) > maxLog {
			return badRule("log of %d timestamps", len(rec.Log))
		}
		for j := 1; j < len(rec.Log); j++ {
			if rec.Log[j] < rec.Log[j-1] {
				return badRule("log timestamps out of order at %d", j)
			}
		}
	case inLeases:
		return checkLeases(rec, maxLog)
	}
	return nil
}

// badState is checkRecord's error for a record's state.
func badState(rec *Record, what string) error {
	return badRule("%s state (%d, %d, %d): %s", rec.Rule.Kind, rec.A, rec.B, rec.C, what)
}

// checkBucketState: a level within the capacity, a progress within the
// interval (bucket.go).
func checkBucketState(rec *Record) error {
	r := rec.Rule
	switch {
	case rec.A < 0 || rec.A > r.Limit:
		return badState(rec, "level outside [0, capacity]")
	case rec.B < 0 || rec.B >= r.Period:
		return badState(rec, "progress outside [0, interval)")
	case rec.A == 0 && rec.B != 0:
		return badState(rec, "progress on an empty level")
	}
	return nil
}

// checkWindowState: an aligned window start and a count within 2^53
// (window.go).
func checkWindowState(rec *Record) error {
	switch {
	case align(rec.A, rec.Rule.Period) != rec.A:
		return badState(rec, "window start not aligned to the window")
	case rec.B < 0 || rec.B > maxCount:
		return badState(rec, "count outside [0, 2^53]")
	}
	return nil
}

// checkFixedState: a window and no third word.
func checkFixedState(rec *Record) error {
	if err := checkWindowState(rec); err != nil {
		return err
	}
	if rec.C != 0 {
		return badState(rec, "third word set")
	}
	return nil
}

// checkSlidingState: a window and a previous count within 2^53.
func checkSlidingState(rec *Record) error {
	if err := checkWindowState(rec); err != nil {
		return err
	}
	if rec.C < 0 || rec.C > maxCount {
		return badState(rec, "previous count outside [0, 2^53]")
	}
	return nil
}

// checkGCRAState: the tat alone.
func checkGCRAState(rec *Record) error {
	if rec.B != 0 || rec.C != 0 {
		return badState(rec, "words beyond tat set")
	}
	return nil
}

// checkLeases: at most maxLog leases, each with a token and units, in
// (expiry, token) order, no token twice, at most 2^53 units held.
func checkLeases(rec *Record, maxLog int64) error {
	if rec.A != 0 || rec.B != 0 || rec.C != 0 {
		return badState(rec, "state words set for a concurrency key")
	}
	if int64(len(rec.Leases)) > maxLog {
		return badRule("%d leases", len(rec.Leases))
	}
	held := int64(0)
	for j, l := range rec.Leases {
		if len(l.Token) < 1 || len(l.Token) > MaxToken {
			return badRule("lease %d: token of %d bytes", j, len(l.Token))
		}
		if l.Units < 1 || l.Units > maxCount-held {
			return badRule("lease %d: %d units", j, l.Units)
		}
		held += l.Units
		if j > 0 {
			p := rec.Leases[j-1]
			if p.Expiry > l.Expiry || p.Expiry == l.Expiry && string(p.Token) >= string(l.Token) {
				return badRule("leases out of (expiry, token) order at %d", j)
			}
		}
	}
	seen := make(map[string]struct{}, len(rec.Leases))
	for j, l := range rec.Leases {
		if _, dup := seen[string(l.Token)]; dup {
			return badRule("lease %d: token repeated", j)
		}
		seen[string(l.Token)] = struct{}{}
	}
	return nil
}

// importString is Import for a KindString record: its rule has no
// parameters, A is the expiry (ms, 0 for none), B and C are zero, the value
// at most maxValueLenCap bytes (a node may have lowered max-value-len
// since). A record expired at the clock's time adds nothing.
func (e *Engine) importString(rec Record) error {
	switch {
	case rec.Rule != Rule{Kind: KindString}:
		return fmt.Errorf("import key %q: %w", rec.Key, badRule("string rule with parameters %d, %d", rec.Rule.Limit, rec.Rule.Period))
	case rec.A < 0 || rec.B != 0 || rec.C != 0:
		return fmt.Errorf("import key %q: %w", rec.Key, badRule("string state (%d, %d, %d)", rec.A, rec.B, rec.C))
	case len(rec.Log) != 0 || len(rec.Leases) != 0:
		return fmt.Errorf("import key %q: %w", rec.Key, badRule("timestamps or leases given for a string"))
	case len(rec.Value) > maxValueLenCap:
		return fmt.Errorf("import key %q: %w", rec.Key, badRule("value of %d bytes", len(rec.Value)))
	}
	hi, s, pos := e.lockCleared(rec.Key)
	defer e.unlk(s)
	s.strInsert(pos, hi, rec.Key, rec.Value, rec.A)
	s.reclaimedAt = math.MinInt64
	return nil
}
