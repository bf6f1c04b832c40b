package deploy

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/respwire"
	"github.com/sluice-rl/sluice/internal/sluiceproc"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// TestVersionAndInfo: sluice version prints the release, commit and Go
// version, and a running node's INFO server reports the same release and
// commit next to redis_version:7.2.0.
func TestVersionAndInfo(t *testing.T) {
	out, err := exec.Command(binary, "version").Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "sluice ") || !strings.HasPrefix(lines[1], "commit ") || !strings.HasPrefix(lines[2], "go1.") {
		t.Fatalf("sluice version: %v\n%s", err, out)
	}
	release := strings.TrimPrefix(lines[0], "sluice ")
	commit := strings.TrimSuffix(strings.TrimPrefix(lines[1], "commit "), " (dirty)")
	if commit == "unknown" {
		commit = "00000000"
	}
	if same, err := exec.Command(binary, "--version").Output(); err != nil || string(same) != string(out) {
		t.Errorf("--version: %q %v, want %q", same, err, out)
	}

	addr := freeAddrs(t, 1)[0]
	p, err := sluiceproc.Start("sluice", binary, []string{"--addr", addr, "--in-memory", "--log-level", "warn"}, sluiceproc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	var info string
	testkit.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		c, err := respwire.Dial(addr, time.Second)
		if err != nil {
			return fmt.Errorf("no INFO server: %w", err)
		}
		defer c.Close()
		v, err := c.Do(2*time.Second, "INFO", "server")
		if err != nil {
			return fmt.Errorf("no INFO server: %w", err)
		}
		info = v.Str
		return nil
	})
	for _, want := range []string{"redis_version:7.2.0\r\n", "sluice_version:" + release + "\r\n", "sluice_git_sha1:" + commit + "\r\n", "sluice_git_dirty:"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO server lacks %q:\n%s", want, info)
		}
	}
}
