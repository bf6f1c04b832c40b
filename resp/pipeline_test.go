package resp

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"

	"github.com/tidwall/redcon"

	"github.com/sluice-rl/sluice/engine"
)

// loopConn serves the same bytes on every read and discards what is
// written, counting it.
type loopConn struct {
	scriptConn
	data    []byte
	written int
	last    []byte
}

func (c *loopConn) Read(p []byte) (int, error) { return copy(p, c.data), nil }
func (c *loopConn) Write(p []byte) (int, error) {
	c.written += len(p)
	c.last = append(c.last[:0], p...)
	return len(p), nil
}

// TestPipelineNoAllocs: a connection that sends the same pipeline of
// limiter calls again and again, RL.ALL and RL.TOKEN, costs no allocation
// per pipeline in the whole path: parser, dispatch, engine, replies
// and their write. It runs the server's own connection code on a loopConn.
func TestPipelineNoAllocs(t *testing.T) {
	all := []string{"RL.ALL", "3", "TOKEN", "u:1", "1000000000", "1/s", "1",
		"TOKEN", "t:1", "1000000000", "1/s", "1", "TOKEN", "g:1", "1000000000", "1/s", "1"}
	tests := []struct {
		name string
		cmd  []string
	}{
		{"RL.ALL", all},
		{"RL.TOKEN", []string{"RL.TOKEN", "u:2", "1000000000", "1/s"}},
		{"RL.TOKEN COST", []string{"RL.TOKEN", "u:3", "1000000000", "10/m", "COST", "2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := engine.New(engine.Config{Stripes: 4})
			srv := NewServer(Config{}, NewLocalExecutor(eng, nil))
			lc := &loopConn{data: []byte(strings.Repeat(encode(tt.cmd...), 16))}
			c := srv.accept(lc)
			run := func() {
				cmds, err := c.rd.next(false)
				if err != nil || len(cmds) != 16 {
					t.Fatalf("%d commands, %v", len(cmds), err)
				}
				srv.runPipeline(c, cmds)
			}
			run() // creates the keys and sizes the scratch slices
			allocs := testing.AllocsPerRun(200, run)
			if allocs != 0 {
				t.Errorf("%v allocations per pipeline of 16", allocs)
			}
			if !strings.HasPrefix(string(lc.last), "*") || strings.Count(string(lc.last), ":1\r\n") < 16 {
				t.Errorf("last write %q is not 16 allowed decisions", lc.last)
			}
		})
	}
}

var _ net.Conn = (*loopConn)(nil)

// sink keeps benchmark results alive.
var sink int

// cutConn serves data over and over in reads of at most cut bytes, which
// end anywhere in a command.
type cutConn struct {
	loopConn
	cut, off int
}

func (c *cutConn) Read(p []byte) (int, error) {
	n := copy(p[:min(len(p), c.cut)], c.data[c.off:])
	c.off = (c.off + n) % len(c.data)
	return n, nil
}

// BenchmarkParser parses pipelines of 16 RL.ALL calls (one op), as
// served: whole, each pipeline in one read; cut, in reads of 1000 bytes
// that end inside commands, which the parser takes up where it stopped;
// and, for comparison, with redcon's reader, which sluice used before.
// (Before #33 this was BenchmarkReqReader, whose "sluice" was the guard
// and the request reader.)
func BenchmarkParser(b *testing.B) {
	all := encode("RL.ALL", "3", "TOKEN", "b:all3:u:12345", "1099511627776", "1/60000ms", "1",
		"TOKEN", "b:all3:t:123", "1099511627776", "1/60000ms", "1", "TOKEN", "b:all3:g:1", "1099511627776", "1/60000ms", "1")
	data := []byte(strings.Repeat(all, 16))
	b.Run("whole", func(b *testing.B) {
		r := newReqParser(&loopConn{data: data}, DefaultLimits())
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			cmds, err := r.next(false)
			if err != nil {
				b.Fatal(err)
			}
			sink += len(cmds)
		}
	})
	b.Run("cut", func(b *testing.B) {
		r := newReqParser(&cutConn{loopConn: loopConn{data: data}, cut: 1000}, DefaultLimits())
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		owed := 0
		for b.Loop() {
			for owed += 16; owed > 0; {
				cmds, err := r.next(false)
				if err != nil {
					b.Fatal(err)
				}
				owed -= len(cmds)
			}
		}
	})
	b.Run("redcon", func(b *testing.B) {
		r := redcon.NewReader(&loopConn{data: data})
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			cmds, err := r.ReadCommands()
			if err != nil {
				b.Fatal(err)
			}
			sink += len(cmds)
		}
	})
}

// BenchmarkPipeline runs pipelines of 16 limiter calls through the
// server's connection code without a network (parser, dispatch,
// engine, replies), as sluice-bench's token and all3 workloads send them:
// RL.TOKEN on one of 100k keys, or RL.ALL of three token buckets, the
// user (one of 100k), its tenant (user/100) and a shared key
// (user/10000). One b.N is one call.
func BenchmarkPipeline(b *testing.B) {
	const users, pipes = 100000, 1024
	args := func(key string) []string { return []string{key, "1099511627776", "1/60000ms", "1"} }
	build := map[string]func(rng *rand.Rand) []string{
		"token": func(rng *rand.Rand) []string {
			a := args(fmt.Sprintf("b:token:%d", rng.IntN(users)))
			return append([]string{"RL.TOKEN"}, a[:3]...)
		},
		"all3": func(rng *rand.Rand) []string {
			u := rng.IntN(users)
			cmd := []string{"RL.ALL", "3", "TOKEN"}
			cmd = append(append(cmd, args(fmt.Sprintf("b:all3:%d", u))...), "TOKEN")
			cmd = append(append(cmd, args(fmt.Sprintf("b:all3:t:%d", u/100))...), "TOKEN")
			return append(cmd, args(fmt.Sprintf("b:all3:g:%d", u/10000))...)
		},
	}
	for _, name := range []string{"token", "all3"} {
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			data := make([][]byte, pipes)
			for i := range data {
				var p []byte
				for range 16 {
					p = append(p, encode(build[name](rng)...)...)
				}
				data[i] = p
			}
			eng := engine.New(engine.Config{})
			srv := NewServer(Config{}, NewLocalExecutor(eng, nil))
			lc := &loopConn{}
			c := srv.accept(lc)
			i := 0
			run := func() {
				lc.data = data[i%pipes]
				i++
				cmds, err := c.rd.next(false)
				if err != nil || len(cmds) != 16 {
					b.Fatalf("%d commands, %v", len(cmds), err)
				}
				srv.runPipeline(c, cmds)
			}
			for range users / 16 {
				run() // most keys exist, as in a run after its warm-up
			}
			b.ReportAllocs()
			b.ResetTimer()
			for n := 0; n < b.N; n += 16 {
				run()
			}
		})
	}
}
