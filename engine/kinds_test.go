package engine

import (
	"fmt"
	"testing"
)

// TestKindTable: every kind below NumKinds has a complete row (kinds.go):
// a name ParseKind reads back, a rule check, a state shape, a record check
// exactly for the three-word kinds, and memory for the state it keeps
// outside its entry.
func TestKindTable(t *testing.T) {
	if got := KindNone.String(); got != "none" {
		t.Errorf("KindNone is %q, want none", got)
	}
	if got := NumKinds.String(); got != "none" {
		t.Errorf("Kind %d, beyond the table, is %q, want none", NumKinds, got)
	}
	seen := map[string]Kind{}
	for k := KindNone + 1; k < NumKinds; k++ {
		row := kinds[k]
		switch {
		case row.name == "" || row.name == "none":
			t.Errorf("kind %d has no row (or no name) in kinds.go", k)
			continue
		case seen[row.name] != 0:
			t.Errorf("kinds %d and %d are both named %q", seen[row.name], k, row.name)
		}
		seen[row.name] = k
		if p, ok := ParseKind(row.name); !ok || p != k {
			t.Errorf("ParseKind(%q) = %d, %v; want %d", row.name, p, ok, k)
		}
		if row.checkRule == nil {
			t.Errorf("kind %s has no checkRule", k)
		}
		if row.shape < inWords || row.shape >= numShapes {
			t.Errorf("kind %s has no state shape", k)
		}
		if (row.checkState != nil) != (row.shape == inWords) {
			t.Errorf("kind %s: checkState set is %v, want it set exactly for a three-word kind", k, row.checkState != nil)
		}
		if row.shape != inWords && row.keyBytes <= 0 {
			t.Errorf("kind %s keeps state outside its entry but counts no memory for it (keyBytes)", k)
		}
		if row.layerable && row.shape != inWords && row.shape != inLog {
			t.Errorf("kind %s is layerable but RL.ALL decides only three-word and log kinds (all.go)", k)
		}
	}
}

// decisionRule is a valid rule of kind k for the switch test.
func decisionRule(k Kind) Rule { return Rule{Kind: k, Limit: 3, Period: sec} }

// TestDecisionSwitches: decide.go's switches (normalize, initial, fresh,
// change, eval, ttl) each have a case for every three-word kind of the
// table; a kind a switch lacks panics there.
func TestDecisionSwitches(t *testing.T) {
	for k := KindNone + 1; k < NumKinds; k++ {
		if kinds[k].shape != inWords {
			continue
		}
		r := decisionRule(k)
		steps := []struct {
			name string
			run  func()
		}{
			{"fresh", func() { _ = fresh(r, t0) }},
			{"normalize", func() { st := fresh(r, t0); normalize(&st, r, t0+sec) }},
			{"initial", func() { st := fresh(r, t0); initial(&st, k, t0) }},
			{"change", func() { st := fresh(r, t0); change(&st, r, Rule{k, 5, 2 * sec}, t0) }},
			{"eval", func() { st := fresh(r, t0); eval(&st, r, 1, t0) }},
			{"ttl", func() { st := fresh(r, t0); ttl(&st, r, t0) }},
		}
		for _, s := range steps {
			if err := panicOf(s.run); err != nil {
				t.Errorf("kind %s: %s: %v (add its case in decide.go)", k, s.name, err)
			}
		}
	}
}

// panicOf runs f and returns what it panicked with, or nil.
func panicOf(f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	f()
	return nil
}

// TestModelledKinds: every kind of the table has a model test. The
// three-word and log kinds are decided by OpDecide and modelled by
// TestDifferential (their rules in ruleVariants); a lease kind by
// TestDifferentialConcurrency and a string kind by FuzzStringOps, each
// written for one kind of its shape.
func TestModelledKinds(t *testing.T) {
	perShape := map[stateShape]int{}
	for k := KindNone + 1; k < NumKinds; k++ {
		sh := kinds[k].shape
		perShape[sh]++
		switch sh {
		case inWords, inLog:
			if len(ruleVariants[k]) == 0 {
				t.Errorf("kind %s has no rules in ruleVariants: model it (model_test.go)", k)
			}
		case inLeases, inValue:
			if perShape[sh] > 1 {
				t.Errorf("kind %s is a second kind of shape %d, whose model is written for one kind: model it", k, sh)
			}
		}
	}
}

// leaseKind is the table's one kind of shape inLeases.
func leaseKind(t *testing.T) Kind {
	t.Helper()
	for k := KindNone + 1; k < NumKinds; k++ {
		if kinds[k].shape == inLeases {
			return k
		}
	}
	t.Fatal("no lease kind in the table")
	return KindNone
}
