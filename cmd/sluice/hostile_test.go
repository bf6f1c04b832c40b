package main

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testkit"
)

// The hostile-input suite (docs/commands.md, "Protocol limits": nothing a
// client sends may crash the node, pin a CPU or grow memory without bound),
// against a real sluice process
// (the default mode: a single durable Raft voter) so that its RSS and CPU
// time can be read from /proc. Each attack is followed by the same checks:
// the process is alive, another client's PING and RL.TOKEN are answered
// within replyBound (the hostile-input issue's 200 ms) at the median of
// probeTries tries, and every try within livenessBound (one durable fsync on
// a loaded CI machine can take longer than 200 ms; a starved client fails
// every try), an idle second after the attack costs less than idleCPUBound
// of CPU, RSS stays within rssGrowthBound of the baseline, and
// a fresh key gets the exact replies of the token bucket's worked example
// (docs/commands.md, "RL.TOKEN") under the frozen clock.
const (
	replyBound     = 200 * time.Millisecond
	livenessBound  = 3 * time.Second
	probeTries     = 5
	idleWindow     = time.Second
	idleCPUBound   = 300 * time.Millisecond
	rssGrowthBound = 64 << 20
	// hostileMaxClients leaves room for the checker's connection and the
	// 1000 idle ones, and no more.
	hostileMaxClients = 1001
	idleConns         = 1000
	// frozenAt is 2030-01-01T00:00:00Z in unix ms: the clock the checks
	// decide at.
	frozenAt = "1893456000000"
)

// hostileNode is one sluice process under attack, and the checker's own
// connection to it.
type hostileNode struct {
	addr  string
	cmd   *exec.Cmd
	check *rawConn
	base  procUsage
}

// plainBinary builds sluice without the race detector: its shadow memory
// multiplies RSS and its instrumentation CPU time, which this suite
// measures. (After go vet, the packages are in the build cache: this is
// mostly a link.)
func plainBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build sluice: %v\n%s", err, out)
	}
	return bin
}

// startHostileNode starts sluice with the debug clock frozen. The bulk limit
// is raised to 4 GiB so that a declared 2 GB bulk passes the header check
// and the query-buffer limit (8 MiB) has to stop it while it streams.
func startHostileNode(t *testing.T) *hostileNode {
	t.Helper()
	a := freeSoloAddrs(t)
	n := &hostileNode{addr: a.addr}
	n.cmd = startProcess(t, plainBinary(t), append(a.flags(), "--data-dir", filepath.Join(t.TempDir(), "data"),
		"--enable-debug-command", "--maxclients", fmt.Sprint(hostileMaxClients),
		"--proto-max-bulk-len", fmt.Sprint(int64(4)<<30), "--log-level", "warn")...)
	// One deadline for both waits.
	deadline := time.Now().Add(20 * time.Second)
	testkit.Eventually(t, time.Until(deadline), 20*time.Millisecond, func() error {
		conn, err := net.DialTimeout("tcp", n.addr, time.Second)
		if err != nil {
			return fmt.Errorf("sluice never listened on %s: %w", n.addr, err)
		}
		conn.Close()
		return nil
	})
	n.check = dialRaw(t, n.addr)
	testkit.Eventually(t, time.Until(deadline), 20*time.Millisecond, func() error {
		// The single voter elects itself: until then, CLUSTERDOWN.
		if r := n.check.do(t, 5*time.Second, "DEBUG", "CLOCK", "FREEZE", frozenAt); r != "+OK" {
			return fmt.Errorf("DEBUG CLOCK FREEZE: %s", r)
		}
		return nil
	})
	// Warm up the paths the checks use before taking the baseline.
	n.decisionsCorrect(t, "warmup")
	var err error
	if n.base, err = readUsage(n.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return n
}

// usage reads the process's RSS and CPU time.
func (n *hostileNode) usage(t *testing.T) procUsage {
	t.Helper()
	u, err := readUsage(n.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("sluice is gone: %v", err)
	}
	return u
}

// alive fails the test if the process has exited.
func (n *hostileNode) alive(t *testing.T) {
	t.Helper()
	if err := n.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("sluice died: %v", err)
	}
	// A zombie still takes signal 0: look at its state too.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("sluice died: %v", err)
	}
	if i := strings.LastIndexByte(string(stat), ')'); i < 0 || strings.HasPrefix(string(stat[i+1:]), " Z") {
		t.Fatalf("sluice died (zombie)")
	}
}

// responsive asserts that the checker's PING and an RL.TOKEN each get the
// median of probeTries answers within replyBound, and every answer within
// livenessBound.
func (n *hostileNode) responsive(t *testing.T) {
	t.Helper()
	for _, args := range [][]string{{"PING"}, {"RL.TOKEN", "probe", "1000000", "1000000/s"}} {
		took := make([]time.Duration, probeTries)
		for try := range took {
			start := time.Now()
			r := n.check.do(t, 2*livenessBound, args...)
			took[try] = time.Since(start)
			if took[try] > livenessBound {
				t.Fatalf("%s answered in %v (liveness bound %v)", args[0], took[try], livenessBound)
			}
			if strings.HasPrefix(r, "-") {
				t.Fatalf("%s: %s", args[0], r)
			}
		}
		slices.Sort(took)
		if median := took[probeTries/2]; median > replyBound {
			t.Fatalf("%s: median of %d answers %v (bound %v): %v", args[0], probeTries, median, replyBound, took)
		}
	}
}

// decisionsCorrect runs the token bucket's worked example on a fresh key: RL.TOKEN k 4
// 4/m four times at one instant is allowed, the fifth is denied with
// retry_after 15000.
func (n *hostileNode) decisionsCorrect(t *testing.T, key string) {
	t.Helper()
	want := []string{
		"*5 [:1 :4 :3 :0 :15000]",
		"*5 [:1 :4 :2 :0 :30000]",
		"*5 [:1 :4 :1 :0 :45000]",
		"*5 [:1 :4 :0 :0 :60000]",
		"*5 [:0 :4 :0 :15000 :60000]",
	}
	for i, w := range want {
		if r := n.check.do(t, 5*time.Second, "RL.TOKEN", "fresh:"+key, "4", "4/m"); r != w {
			t.Fatalf("RL.TOKEN call %d on a fresh key: %s, want %s", i+1, r, w)
		}
	}
}

// memoryBounded asserts RSS is within rssGrowthBound of the baseline.
func (n *hostileNode) memoryBounded(t *testing.T) procUsage {
	t.Helper()
	u := n.usage(t)
	if growth := u.rss - n.base.rss; growth > rssGrowthBound {
		t.Fatalf("RSS %d MiB, %d MiB above the baseline (bound %d MiB)",
			u.rss>>20, growth>>20, rssGrowthBound>>20)
	}
	return u
}

// healthy runs every check after an attack.
func (n *hostileNode) healthy(t *testing.T, key string) {
	t.Helper()
	n.alive(t)
	n.responsive(t)
	n.decisionsCorrect(t, key)
	before := n.memoryBounded(t)
	time.Sleep(idleWindow) // a measurement window, not a wait for a state
	after := n.usage(t)
	if burnt := after.cpu - before.cpu; burnt > idleCPUBound {
		t.Fatalf("%v of CPU over an idle %v after the attack (bound %v)", burnt, idleWindow, idleCPUBound)
	}
	t.Logf("RSS %d MiB (baseline %d MiB); CPU over the idle %v: %v",
		after.rss>>20, n.base.rss>>20, idleWindow, after.cpu-before.cpu)
}

// waitClients polls INFO until the server counts want connected clients.
func (n *hostileNode) waitClients(t *testing.T, want int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		info := n.check.do(t, 5*time.Second, "INFO", "clients")
		if !strings.Contains(info, fmt.Sprintf("connected_clients:%d\r\n", want)) {
			return fmt.Errorf("connected clients never fell to %d:\n%s", want, info)
		}
		return nil
	})
}

// expectClosed reads until the server closes the connection (at most max
// bytes, within 5 s) and returns what it sent.
func expectClosed(t *testing.T, conn net.Conn, max int64) string {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(io.LimitReader(conn, max))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open (read %q)", b)
	}
	return string(b)
}

// writeFor writes chunks produced by next until the total reaches max, the
// time is up, or a write fails; it returns the bytes written.
func writeFor(conn net.Conn, max int64, d time.Duration, next func() []byte) (int64, error) {
	var total int64
	stop := time.Now().Add(d)
	for total < max && time.Now().Before(stop) {
		_ = conn.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := conn.Write(next())
		total += int64(n)
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return total, err
		}
	}
	return total, nil
}

func TestHostileInput(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real process")
	}
	n := startHostileNode(t)
	attacks := []struct {
		name string
		run  func(t *testing.T, n *hostileNode)
	}{
		{"bulk length 2^63-1", func(t *testing.T, n *hostileNode) {
			c := dialRaw(t, n.addr)
			_, _ = c.conn.Write([]byte("*1\r\n$9223372036854775807\r\n"))
			if got := expectClosed(t, c.conn, 4096); got != "-ERR Protocol error: invalid bulk length\r\n" {
				t.Fatalf("reply %q", got)
			}
		}},
		{"multibulk count 2^63-1", func(t *testing.T, n *hostileNode) {
			c := dialRaw(t, n.addr)
			_, _ = c.conn.Write([]byte("*9223372036854775807\r\n"))
			if got := expectClosed(t, c.conn, 4096); got != "-ERR Protocol error: invalid multibulk length\r\n" {
				t.Fatalf("reply %q", got)
			}
		}},
		{"inline line that never ends", func(t *testing.T, n *hostileNode) {
			c := dialRaw(t, n.addr)
			chunk := []byte(strings.Repeat("A", 4096))
			written, _ := writeFor(c.conn, 64<<20, 2*time.Second, func() []byte { return chunk })
			if got := expectClosed(t, c.conn, 4096); got != "-ERR Protocol error: too big inline request\r\n" {
				t.Fatalf("reply %q after %d bytes", got, written)
			}
		}},
		{"declared 2 GB bulk streamed", func(t *testing.T, n *hostileNode) {
			c := dialRaw(t, n.addr)
			if _, err := c.conn.Write([]byte("*2\r\n$4\r\nECHO\r\n$2147483648\r\n")); err != nil {
				t.Fatal(err)
			}
			chunk := make([]byte, 64<<10)
			written, err := writeFor(c.conn, 64<<20, 5*time.Second, func() []byte { return chunk })
			if err == nil {
				t.Fatalf("the server took %d MiB of a 2 GB bulk without closing (query buffer limit 8 MiB)", written>>20)
			}
			t.Logf("the server closed after %d MiB were written: %v", written>>20, err)
		}},
		{"pipelining forever without reading", func(t *testing.T, n *hostileNode) {
			// Commands with large replies (COMMAND DOCS is ~10 KB for 14
			// bytes) make the server's pending replies the thing to bound.
			pipeline := []byte(strings.Repeat(strings.Repeat("COMMAND DOCS\r\n", 32)+"PING\r\n"+
				encodeCmd("RL.TOKEN", "pipe", "100", "10/s"), 32))
			var wg sync.WaitGroup
			var written [8]int64
			for i := range written {
				c := dialRaw(t, n.addr)
				wg.Add(1)
				go func() {
					defer wg.Done()
					written[i], _ = writeFor(c.conn, 256<<20, time.Second, func() []byte { return pipeline })
				}()
			}
			wg.Wait()
			t.Logf("bytes written by the 8 clients before they stalled: %v", written)
			// They are still connected, unread: everyone else goes on.
			n.alive(t)
			n.responsive(t)
			n.memoryBounded(t)
		}},
		{"1000 idle connections and maxclients", func(t *testing.T, n *hostileNode) {
			n.waitClients(t, 1)
			for range idleConns {
				dialRaw(t, n.addr)
			}
			n.waitClients(t, 1+idleConns)
			n.responsive(t)
			n.memoryBounded(t)
			// One more is refused with Redis's error.
			extra := dialRaw(t, n.addr)
			if got := expectClosed(t, extra.conn, 4096); got != "-ERR max number of clients reached\r\n" {
				t.Fatalf("connection %d of %d: %q", hostileMaxClients+1, hostileMaxClients, got)
			}
		}},
		{"random bytes", func(t *testing.T, n *hostileNode) {
			const seed = 20261121 // fixed: the same bytes on every run
			var wg sync.WaitGroup
			for i := range 16 {
				c := dialRaw(t, n.addr)
				wg.Add(2)
				go func() { // drain whatever the server answers
					defer wg.Done()
					_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
					_, _ = io.Copy(io.Discard, c.conn)
				}()
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, uint64(i)))
					buf := make([]byte, 16<<10)
					_, _ = writeFor(c.conn, 256<<10, time.Second, func() []byte {
						for j := range buf {
							buf[j] = byte(rng.Uint32())
						}
						return buf
					})
					_ = c.conn.Close()
				}()
			}
			wg.Wait()
		}},
		{"HTTP request on the RESP port", func(t *testing.T, n *hostileNode) {
			get := dialRaw(t, n.addr)
			_, _ = get.conn.Write([]byte("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n"))
			// GET is Redis's string command: "GET / HTTP/1.1" is a GET with two
			// arguments, the arity error redis-server answers too.
			if got := expectClosed(t, get.conn, 4096); got != "-ERR wrong number of arguments for 'get' command\r\n" {
				t.Fatalf("GET: %q, want one arity error, then the close at Host:", got)
			}
			post := dialRaw(t, n.addr)
			_, _ = post.conn.Write([]byte("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"))
			if got := expectClosed(t, post.conn, 4096); got != "" {
				t.Fatalf("POST: %q, want a close without a reply", got)
			}
		}},
	}
	for i, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			a.run(t, n)
			n.healthy(t, fmt.Sprint(i))
		})
	}
	// After the idle connections are gone, a new client gets a slot again.
	n.waitClients(t, 1)
	c := dialRaw(t, n.addr)
	if r := c.do(t, 5*time.Second, "PING"); r != "+PONG" {
		t.Fatalf("a new client after the attacks: %s", r)
	}
}
