package persistence

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClaimLogStore: a data dir keeps the log store it was created with;
// asking for the other one on a dir that holds a log is refused with an
// error naming both, whether the dir recorded its store or predates the
// record (a raft.db alone means bolt).
func TestClaimLogStore(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, d DataDir)
		claim   string
		has     string // the store the dir holds; "" for none
		wantErr bool
	}{
		{name: "empty dir, bolt", claim: LogStoreBolt},
		{name: "empty dir, wal", claim: LogStoreWAL},
		{name: "bolt then bolt", prepare: claim(LogStoreBolt), claim: LogStoreBolt},
		{name: "wal then wal", prepare: claim(LogStoreWAL), claim: LogStoreWAL},
		{name: "bolt then wal", prepare: claim(LogStoreBolt), claim: LogStoreWAL, has: LogStoreBolt, wantErr: true},
		{name: "wal then bolt", prepare: claim(LogStoreWAL), claim: LogStoreBolt, has: LogStoreWAL, wantErr: true},
		{name: "old dir with raft.db, wal", prepare: writeRaftDB, claim: LogStoreWAL, has: LogStoreBolt, wantErr: true},
		{name: "old dir with raft.db, bolt", prepare: writeRaftDB, claim: LogStoreBolt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := OpenDataDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if tc.prepare != nil {
				tc.prepare(t, d)
			}
			err = d.ClaimLogStore(tc.claim)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("ClaimLogStore(%s): %v", tc.claim, err)
				}
				if got, err := d.LogStore(); err != nil || got != tc.claim {
					t.Fatalf("LogStore() = %q, %v after claiming %s", got, err, tc.claim)
				}
				if _, err := os.Stat(filepath.Join(d.Root(), "raft-log")); err != nil {
					t.Fatalf("the claim was not recorded: %v", err)
				}
				if tc.claim == LogStoreWAL {
					if fi, err := os.Stat(d.WALDir()); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
						t.Fatalf("wal dir: %v %v", fi, err)
					}
				}
				return
			}
			var mm *LogStoreMismatchError
			if !errors.As(err, &mm) || mm.Has != tc.has || mm.Want != tc.claim {
				t.Fatalf("ClaimLogStore(%s) = %v, want a mismatch: has %s", tc.claim, err, tc.has)
			}
			if msg := err.Error(); !strings.Contains(msg, `"`+tc.has+`"`) || !strings.Contains(msg, `"`+tc.claim+`"`) {
				t.Fatalf("the error does not name both stores: %s", msg)
			}
			if got, _ := d.LogStore(); got != tc.has {
				t.Fatalf("a refused claim changed the record to %q", got)
			}
		})
	}
}

func TestLogStoreRecordWins(t *testing.T) {
	d, err := OpenDataDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Both stores' files and no record: the node cannot know which is its
	// log, so it refuses rather than guess.
	writeRaftDB(t, d)
	if err := os.MkdirAll(d.WALDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.WALDir(), "wal-meta.db"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.ClaimLogStore(LogStoreBolt); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("a dir with both stores' files: %v", err)
	}
	if err := os.WriteFile(filepath.Join(d.Root(), "raft-log"), []byte("wal\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := d.LogStore(); err != nil || got != LogStoreWAL {
		t.Fatalf("with a record: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(d.Root(), "raft-log"), []byte("lsm\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := d.LogStore(); err == nil {
		t.Fatal("an unknown store in the record was accepted")
	}
	if err := d.ClaimLogStore("lsm"); err == nil {
		t.Fatal("an unknown store was claimed")
	}
}

func claim(kind string) func(*testing.T, DataDir) {
	return func(t *testing.T, d DataDir) {
		t.Helper()
		if err := d.ClaimLogStore(kind); err != nil {
			t.Fatal(err)
		}
		// Give the store a log, as a node that ran would.
		if kind == LogStoreWAL {
			if err := os.WriteFile(filepath.Join(d.WALDir(), "wal-meta.db"), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		} else {
			writeRaftDB(t, d)
		}
	}
}

func writeRaftDB(t *testing.T, d DataDir) {
	t.Helper()
	if err := os.WriteFile(d.RaftDB(), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestClusterVersionRecord: the data dir records the highest cluster
// version, refuses a binary that supports less, and from version 2 on
// carries in raft-log the line that turns away releases before versions
// (which read the whole file as the store's name), while this one still
// reads its store.
func TestClusterVersionRecord(t *testing.T) {
	d, err := OpenDataDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := d.ClaimLogStore(LogStoreWAL); err != nil {
		t.Fatal(err)
	}
	if v, err := d.ClusterVersion(); err != nil || v != 0 {
		t.Fatalf("a new dir records version %d, %v", v, err)
	}
	if err := d.RecordClusterVersion(1, "x"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(d.logStoreFile()); string(b) != "wal\n" {
		t.Fatalf("version 1 changed raft-log: %q", b)
	}
	if err := d.RecordClusterVersion(2, "sluice v0.2.0 or later"); err != nil {
		t.Fatal(err)
	}
	if err := d.RecordClusterVersion(1, "x"); err != nil { // never down
		t.Fatal(err)
	}
	if v, err := d.ClusterVersion(); err != nil || v != 2 {
		t.Fatalf("records version %d, %v", v, err)
	}
	b, _ := os.ReadFile(d.logStoreFile())
	if want := "wal\nthis data dir is at cluster version 2: it needs sluice v0.2.0 or later\n"; string(b) != want {
		t.Fatalf("raft-log %q, want %q", b, want)
	}
	if kind, err := d.LogStore(); err != nil || kind != LogStoreWAL {
		t.Fatalf("store %q, %v", kind, err)
	}
	if err := d.ClaimLogStore(LogStoreWAL); err != nil {
		t.Fatal(err)
	}
	if err := d.CheckClusterVersion(2); err != nil {
		t.Fatal(err)
	}
	err = d.CheckClusterVersion(1)
	var ve *ClusterVersionError
	if !errors.As(err, &ve) || ve.Has != 2 || ve.Supported != 1 || !strings.Contains(err.Error(), "cluster version 2") {
		t.Fatalf("a binary of version 1: %v", err)
	}
}
