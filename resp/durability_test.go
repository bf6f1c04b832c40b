package resp

import (
	"fmt"
	"strings"
	"testing"
)

// TestDurabilityReported: INFO persistence and CONFIG GET appendfsync
// report the durability mode the server was given, and INFO the log
// store; a server that keeps nothing on disk reports "no" and "none".
func TestDurabilityReported(t *testing.T) {
	tests := []struct {
		name            string
		cfg             Config
		fsync, store    string
		aof, appendonly string
	}{
		{"in memory", Config{}, "no", "none", "0", "no"},
		{"in memory, mode given", Config{AppendFsync: "always", LogStore: "wal"}, "no", "none", "0", "no"},
		{"always bolt", Config{Persistent: true, AppendFsync: "always", LogStore: "bolt"}, "always", "bolt", "1", "yes"},
		{"everysec wal", Config{Persistent: true, AppendFsync: "everysec", LogStore: "wal"}, "everysec", "wal", "1", "yes"},
		{"no bolt", Config{Persistent: true, AppendFsync: "no", LogStore: "bolt"}, "no", "bolt", "1", "yes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := rawDial(t, startServer(t, tc.cfg))
			info := string(c.do(t, "INFO", "persistence"))
			for _, want := range []string{
				"aof_enabled:" + tc.aof + "\r\n",
				"appendfsync:" + tc.fsync + "\r\n",
				"raft_log_store:" + tc.store + "\r\n",
			} {
				if !strings.Contains(info, want) {
					t.Fatalf("INFO persistence lacks %q:\n%s", want, info)
				}
			}
			c.do(t, "CONFIG", "GET", "appendfsync").expect(t, fmt.Sprintf("*2 [$11 appendfsync $%d %s]", len(tc.fsync), tc.fsync))
			got := string(c.do(t, "CONFIG", "GET", "append*"))
			if !strings.Contains(got, fmt.Sprintf("appendonly $%d %s", len(tc.appendonly), tc.appendonly)) ||
				!strings.Contains(got, fmt.Sprintf("appendfsync $%d %s", len(tc.fsync), tc.fsync)) {
				t.Fatalf("CONFIG GET append* = %q", got)
			}
		})
	}
}
