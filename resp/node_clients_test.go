package resp

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeClients connects ioredis and node-redis with their default
// settings. .ci/run installs them with npm and sets SLUICE_NODE_MODULES to
// the folder holding node_modules; elsewhere the test is skipped.
func TestNodeClients(t *testing.T) {
	dir := os.Getenv("SLUICE_NODE_MODULES")
	node, err := exec.LookPath("node")
	if dir == "" || err != nil {
		t.Skip("SLUICE_NODE_MODULES or node not set up (.ci/run installs ioredis and redis with npm)")
	}
	addr := debugServer(t, epoch2030)
	_, port, _ := strings.Cut(addr, ":")
	script, err := filepath.Abs("testdata/node/clients.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Node resolves packages from the script's folder upwards: run a copy
	// placed beside node_modules.
	copyPath := filepath.Join(dir, "sluice-clients.mjs")
	src, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, src, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(node, copyPath, port).CombinedOutput()
	if err != nil {
		t.Fatalf("node clients: %v\n%s", err, out)
	}
	want := strings.Join([]string{
		"ioredis.token [1,10,9,0,1000]",
		"ioredis.peek null",
		"ioredis.throttle [0,16,15,-1,2]",
		"node-redis.token [1,10,9,0,1000]",
		"node-redis.peek null",
		"node-redis.proto 3",
	}, "\n")
	if got := strings.TrimSpace(string(out)); got != want {
		t.Fatalf("node clients replied:\n%s\nwant:\n%s", got, want)
	}
}
