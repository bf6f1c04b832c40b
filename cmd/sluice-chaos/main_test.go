package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEmptyOutDir(t *testing.T) {
	dir := t.TempDir()
	prev := filepath.Join(dir, "prev")
	other := filepath.Join(dir, "other")
	for _, f := range []string{filepath.Join(prev, "chaos.log"), filepath.Join(other, "precious.txt")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := emptyOutDir(filepath.Join(dir, "absent")); err != nil {
		t.Fatalf("absent directory: %v", err)
	}
	if err := emptyOutDir(prev); err != nil {
		t.Fatalf("previous output: %v", err)
	}
	if _, err := os.Stat(prev); !os.IsNotExist(err) {
		t.Fatalf("previous output still there: %v", err)
	}
	if err := emptyOutDir(other); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("another directory: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(other, "precious.txt")); err != nil {
		t.Fatalf("another directory was touched: %v", err)
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		args       []string
		wantErr    string
		wantShards int // 0: the default, 1
	}{
		{args: nil},
		{args: []string{"-duration", "60s", "-seed", "7"}},
		{args: []string{"-duration", "0s"}, wantErr: "-duration"},
		{args: []string{"-skew", "2m"}, wantErr: "-skew"},
		{args: []string{"-hold-min", "5s", "-hold-max", "1s"}, wantErr: "-hold-min"},
		{args: []string{"stray"}, wantErr: "unexpected argument"},
		{args: []string{"-shards", "3"}, wantShards: 3},
		{args: []string{"-shards", "0"}, wantErr: "-shards"},
		{args: []string{"-shards", "65"}, wantErr: "-shards"},
		{args: []string{"-sluice-flags", "--fsync always --shards 3"}, wantErr: "give the Raft groups as -shards"},
		{args: []string{"-sluice-flags", "--shards=2"}, wantErr: "give the Raft groups as -shards"},
		{args: []string{"-sluice-flags", "--lock-stripes 64"}},
		{args: []string{"-faults", "replace,kill-leader"}},
		{args: []string{"-faults", "replace,nap"}, wantErr: "-faults: unknown fault kind"},
	}
	for _, tc := range tests {
		o, err := parseOptions(tc.args, io.Discard)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want %q", tc.args, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
		}
		if o.seed == 0 || o.duration <= 0 || o.duration > time.Hour {
			t.Errorf("%q: %+v", tc.args, o)
		}
		if want := max(tc.wantShards, 1); o.shards != want {
			t.Errorf("%q: shards %d, want %d", tc.args, o.shards, want)
		}
	}
}
