package resp

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/internal/servetest"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// gatedExecutor runs ops on a LocalExecutor once the gate opens.
type gatedExecutor struct {
	next    Executor
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedExecutor) Execute(ctx context.Context, ops []engine.Op, results []engine.Result) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.next.Execute(ctx, ops, results)
}

// TestDrain: Drain stops accepting connections, ends an idle connection at
// once, lets a busy one write the reply of the command it is running, and
// one that had sent half a command finish sending it and get its reply,
// then ends them too, and returns once none is left.
func TestDrain(t *testing.T) {
	eng := engine.New(engine.Config{Stripes: 4})
	exec := &gatedExecutor{next: NewLocalExecutor(eng, nil), entered: make(chan struct{}, 4), gate: make(chan struct{})}
	srv := NewServer(Config{Engine: eng, Tracker: NewTracker(0)}, exec)
	addr := servetest.Start(t, srv)
	idle, busy, half := rawDial(t, addr), rawDial(t, addr), rawDial(t, addr)
	idle.do(t, "PING").expect(t, "+PONG")
	busy.send(t, encode("RL.TOKEN", "k", "5", "1/s"))
	<-exec.entered
	cmd := encode("RL.TOKEN", "h", "5", "1/s")
	half.send(t, cmd[:len(cmd)/2])

	drained := make(chan error, 1)
	go func() { drained <- srv.Drain(context.Background()) }()
	closed := func(c *rawConn) error {
		_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.conn.ReadReply()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && strings.Contains(err.Error(), "reset")) {
			return nil
		}
		return err
	}
	if err := closed(idle); err != nil {
		t.Fatalf("the idle connection: %v, want it closed", err)
	}
	half.send(t, cmd[len(cmd)/2:]) // within drainPartialGrace
	testkit.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil // the listener is closed
		}
		c.Close()
		return errors.New("Drain left the listener open")
	})
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while a command was running", err)
	default:
	}
	close(exec.gate)
	if r := busy.read(t); !strings.HasPrefix(string(r), "*5") {
		t.Fatalf("the running command's reply: %q, want RL.TOKEN's", r)
	}
	if err := closed(busy); err != nil {
		t.Fatalf("the busy connection after its reply: %v, want it closed", err)
	}
	if r := half.read(t); !strings.HasPrefix(string(r), "*5") {
		t.Fatalf("the reply to the command finished while draining: %q, want RL.TOKEN's", r)
	}
	if err := closed(half); err != nil {
		t.Fatalf("the connection that finished its command: %v, want it closed", err)
	}
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("Drain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Drain did not return once every connection ended")
	}
}
