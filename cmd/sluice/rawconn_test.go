package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
)

// rawConn is a minimal RESP client for the process tests: it sends exact
// bytes and flattens each reply to text by respwire.NoLengths (":1",
// "+PONG", "-ERR ...", "$" and a bulk string's bytes, "*5 [:1 :4 :3 :0
// :15000]"), so that a test asserts on the wire.
type rawConn struct {
	conn *respwire.Conn
}

// dialRaw connects to addr; the connection closes when the test ends.
func dialRaw(t testing.TB, addr string) *rawConn {
	t.Helper()
	conn, err := respwire.Dial(addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rawConn{conn: conn}
}

// encodeCmd renders a command as a RESP multibulk.
func encodeCmd(args ...string) string { return string(respwire.AppendCommand(nil, args...)) }

// do sends one command and returns its reply, failing the test on an I/O
// error or when no reply comes within timeout.
func (c *rawConn) do(t testing.TB, timeout time.Duration, args ...string) string {
	t.Helper()
	_ = c.conn.SetDeadline(time.Now().Add(timeout))
	if err := c.conn.Send(args...); err != nil {
		t.Fatalf("%s: write: %v", args[0], err)
	}
	v, err := c.conn.ReadReply()
	if err != nil {
		t.Fatalf("%s: no reply within %v: %v", args[0], timeout, err)
	}
	return v.Text(respwire.NoLengths)
}

// procUsage is what /proc says about a process.
type procUsage struct {
	rss int64         // resident set, bytes
	cpu time.Duration // user + system CPU time
}

// readUsage reads a process's RSS from /proc/PID/status and its CPU time
// from /proc/PID/stat (in USER_HZ ticks, 100 per second on Linux).
func readUsage(pid int) (procUsage, error) {
	var u procUsage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, fmt.Errorf("read status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) < 1 {
				return u, fmt.Errorf("VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return u, fmt.Errorf("VmRSS line %q: %w", line, err)
			}
			u.rss = kb << 10
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, fmt.Errorf("read stat: %w", err)
	}
	// The command name may hold spaces: fields count from after its ')'.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat)[i+1:])
	if i < 0 || len(f) < 13 {
		return u, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	var ticks int64
	for _, s := range f[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return u, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	u.cpu = time.Duration(ticks) * 10 * time.Millisecond
	return u, nil
}
