package resp

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// notInTranscripts are the commands no transcript sends, each with where
// it is tested instead. A new command gets a transcript (docs/design.md,
// "Where things go"), or a line here saying why not.
var notInTranscripts = map[string]string{
	"quit":          "closes the connection: resp/clients_test.go, resp/commands_test.go TestNoAuthFlagDecides",
	"raft.backup":   "needs a real Raft group: cluster/backup_test.go, cmd/sluice TestBackupRestoreProcesses",
	"raft.join":     "needs real Raft groups: cmd/sluice TestShardedClusterMembership",
	"raft.remove":   "needs real Raft groups: cmd/sluice TestShardedClusterMembership",
	"raft.snapshot": "needs a real Raft group: cmd/sluice TestStringsSurviveRestart, TestJoinCatchUpTime",
	"client|info":   "its line holds an address and an age: TestClientList, TestHelloReplies",
}

// TestEveryCommandInATranscript: every command and subcommand of the table
// (in every mode) is sent by some transcript under testdata/transcripts, or
// is listed in notInTranscripts with the test that covers it instead.
func TestEveryCommandInATranscript(t *testing.T) {
	sent := map[string]bool{}
	files, err := filepath.Glob(filepath.Join("testdata", "transcripts", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for _, c := range parseTranscript(t, f) {
			if w := strings.Fields(c.command); len(w) > 0 {
				sent[strings.ToLower(w[0])] = true
				if len(w) > 1 {
					sent[strings.ToLower(w[0]+"|"+w[1])] = true
				}
			}
		}
	}
	var missing []string
	seen := map[string]bool{}
	for _, raft := range []bool{false, true} {
		for _, redisCluster := range []bool{false, true} {
			for _, cmd := range buildCommandTable(raft, redisCluster) {
				for _, c := range append([]*command{cmd}, cmd.subs...) {
					if seen[c.name] {
						continue
					}
					seen[c.name] = true
					_, exempt := notInTranscripts[c.name]
					switch {
					case sent[c.name] && exempt:
						t.Errorf("%s is sent by a transcript: remove it from notInTranscripts", c.name)
					case !sent[c.name] && !exempt:
						missing = append(missing, c.name)
					}
				}
			}
		}
	}
	for name := range notInTranscripts {
		if !seen[name] {
			t.Errorf("notInTranscripts names %s, which is not a command", name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("no transcript sends %d commands or subcommands: %s", len(missing), strings.Join(missing, ", "))
	}
}
