package testkit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	calls := 0
	err := Poll(time.Second, time.Millisecond, func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Poll = %v after %d calls, want nil after 3", err, calls)
	}

	calls = 0
	start := time.Now()
	err = Poll(20*time.Millisecond, 5*time.Millisecond, func() error { calls++; return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "never") || !strings.Contains(err.Error(), "20ms") {
		t.Fatalf("Poll past its timeout = %v, want the last error and the timeout", err)
	}
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond || calls < 2 {
		t.Fatalf("Poll gave up after %v and %d calls", elapsed, calls)
	}
}

func TestPollContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	start := time.Now()
	err := PollContext(ctx, time.Minute, time.Millisecond, func() error {
		if calls++; calls == 3 {
			cancel()
		}
		return errors.New("not yet")
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not yet") || calls != 3 {
		t.Fatalf("PollContext after its context ended = %v after %d calls, want the context's error and the last one after 3", err, calls)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("PollContext took %v to see its context end", elapsed)
	}
	if err := PollContext(context.Background(), time.Second, time.Millisecond, func() error { return nil }); err != nil {
		t.Fatalf("PollContext of a true condition = %v", err)
	}
}

// fakeTB records a fatal failure instead of ending the test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Fatal(args ...any) { f.failed = args[0].(error).Error() }

func TestEventually(t *testing.T) {
	ok := &fakeTB{TB: t}
	n := 0
	Eventually(ok, time.Second, time.Millisecond, func() error {
		if n++; n < 2 {
			return errors.New("soon")
		}
		return nil
	})
	if ok.failed != "" {
		t.Fatalf("a condition that came true failed the test: %s", ok.failed)
	}
	bad := &fakeTB{TB: t}
	Eventually(bad, 10*time.Millisecond, time.Millisecond, func() error { return errors.New("stuck") })
	if !strings.Contains(bad.failed, "stuck") {
		t.Fatalf("a condition that never came true failed with %q", bad.failed)
	}
}

// TestLineDiff names the differing lines with both texts' labels, stops
// after limit of them, and says nothing for equal texts.
func TestLineDiff(t *testing.T) {
	want := "a\nb\nc\nd"
	got := "a\nB\nc\nD\ne"
	if d := LineDiff("want", want, "got", got, 0); d != "line 2:\n  want: b\n  got:  B\nline 4:\n  want: d\n  got:  D\nline 5:\n  want: \n  got:  e\n" {
		t.Fatalf("LineDiff = %q", d)
	}
	if d := LineDiff("want", want, "got", got, 1); d != "line 2:\n  want: b\n  got:  B\n" {
		t.Fatalf("LineDiff limit 1 = %q", d)
	}
	if d := LineDiff("README", want, "transcript", want, 0); d != "" {
		t.Fatalf("LineDiff of equal texts = %q", d)
	}
}
