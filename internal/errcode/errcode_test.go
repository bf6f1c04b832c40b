package errcode

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestIs: a sentinel matches every error of its code whatever its details
// and through wrapping; Uncertain matches its whole class and nothing else.
func TestIs(t *testing.T) {
	uncertain, down := New(Uncertain), New(ClusterDown)
	tests := []struct {
		err           error
		target        error
		want          bool
		wantUncertain bool
		wantCodeViaOf Code
	}{
		{&Error{Code: ClusterDown, Num: 5}, down, true, false, ClusterDown},
		{fmt.Errorf("ctx: %w", &Error{Code: BadRule, Detail: "x"}), New(BadRule), true, false, BadRule},
		{&Error{Code: CommitTimeout, Num: 1}, New(CommitTimeout), true, true, CommitTimeout},
		{New(DuplicateBatch), New(OutcomeUnknown), false, true, DuplicateBatch},
		{New(ShuttingDown), down, false, false, ShuttingDown},
		{New(WrongType), New(OOM), false, false, WrongType},
	}
	for _, tt := range tests {
		if got := errors.Is(tt.err, tt.target); got != tt.want {
			t.Errorf("Is(%v, %v) = %v", tt.err, tt.target, got)
		}
		if got := errors.Is(tt.err, uncertain); got != tt.wantUncertain {
			t.Errorf("Is(%v, Uncertain) = %v", tt.err, got)
		}
		if e := Of(tt.err); e == nil || e.Code != tt.wantCodeViaOf {
			t.Errorf("Of(%v) = %v", tt.err, e)
		}
	}
	if got := (&Error{Code: ClusterDown, Num: 2e9}).Error(); got != "cluster down (2s)" {
		t.Errorf("a timeout reads %q in logs", got)
	}
	if Of(errors.New("plain")) != nil || Is(errors.New("plain"), Internal) {
		t.Error("an error without a code has one")
	}
	for c := range NumCodes {
		if c.String() == "" || c.String() == "code "+fmt.Sprint(int(c)) {
			t.Errorf("code %d has no name", c)
		}
	}
}

// Of, which every request's path asks of its error (nil when it went
// well), allocates nothing for nil or an *Error itself; a wrapped one is
// still found.
func TestOfAllocatesNothingOnTheHotPath(t *testing.T) {
	direct := &Error{Code: ClusterDown}
	if n := testing.AllocsPerRun(100, func() {
		if Of(nil) != nil || Of(direct) != direct {
			t.Fatal("Of lost its answer")
		}
	}); n != 0 {
		t.Errorf("Of allocates %v times for nil and an *Error", n)
	}
	if Of(fmt.Errorf("ctx: %w", direct)) != direct {
		t.Error("Of misses a wrapped *Error")
	}
}

// TestCatalogue fails for a code without a complete row, a reply with an
// unknown placeholder, or a class its reply contradicts: UNCERTAIN is the
// may-have-applied class's reply and no other's (CLUSTERDOWN means
// certainly not applied).
func TestCatalogue(t *testing.T) {
	for c := range NumCodes {
		e := c.Entry()
		if e.Name == "" || e.Reply == "" || e.Producer == "" || e.Assume == "" {
			t.Errorf("code %d has no complete catalogue row: %+v", c, e)
		}
		rest := e.Reply
		for {
			i := strings.IndexByte(rest, '{')
			if i < 0 {
				break
			}
			j := strings.IndexByte(rest[i:], '}')
			if j < 0 {
				t.Errorf("%v: unclosed placeholder in %q", c, e.Reply)
				break
			}
			if !slices.Contains(placeholders, rest[i:i+j+1]) {
				t.Errorf("%v: unknown placeholder %s in %q", c, rest[i:i+j+1], e.Reply)
			}
			rest = rest[i+j+1:]
		}
		if strings.Contains(e.Bare, "{") {
			t.Errorf("%v: a bare reply has a placeholder: %q", c, e.Bare)
		}
		if uncertain := strings.HasPrefix(e.Reply, "UNCERTAIN "); uncertain != (e.Class == MayHaveApplied) {
			t.Errorf("%v: class %d contradicts its reply %q", c, e.Class, e.Reply)
		}
	}
	if (NumCodes + 1).Entry() != (Entry{}) {
		t.Error("a code beyond NumCodes has a row")
	}
}
