package scriptdiff

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/freeport"
	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// The redis-server the differential tests compare sluice with.

// StartRedis starts a redis-server on a free port of 127.0.0.1 with
// nothing on disk, for the length of the test, and returns its address
// once it answers PING; it skips the test when redis-server is not on
// PATH.
func StartRedis(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH")
	}
	ports, err := freeport.Ports(1)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	cmd := exec.Command(bin, "--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testkit.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		c, err := respwire.Dial(addr, time.Second)
		if err != nil {
			return fmt.Errorf("redis-server at %s did not answer PING: %w", addr, err)
		}
		defer c.Close()
		v, err := c.Do(time.Second, "PING")
		if err != nil || v.Text(respwire.WithLengths) != "+PONG" {
			return fmt.Errorf("redis-server at %s did not answer PING: %v %v", addr, v.Text(respwire.WithLengths), err)
		}
		return nil
	})
	return addr
}
