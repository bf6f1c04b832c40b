package main

import (
	"io"
	"strings"
	"testing"
)

// TestGCMinHeadroom: --gc-min-headroom takes a byte size, 16mb by default,
// 0 for off, from the command line or the configuration file; a negative
// size is refused with a message naming the setting.
func TestGCMinHeadroom(t *testing.T) {
	for _, c := range []struct {
		args []string
		want byteSize
	}{
		{nil, 16 << 20},
		{[]string{"--gc-min-headroom", "0"}, 0},
		{[]string{"--gc-min-headroom=128mb"}, 128 << 20},
		{[]string{"--gc-min-headroom", "1000000"}, 1e6},
		{[]string{"--config", writeConfig(t, "gc-min-headroom 1gb\n")}, 1 << 30},
		{[]string{"--config", writeConfig(t, "gc-min-headroom 1gb\n"), "--gc-min-headroom", "0"}, 0},
	} {
		cfg, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if cfg.GCMinHeadroom != c.want {
			t.Errorf("%v: --gc-min-headroom %d, want %d", c.args, cfg.GCMinHeadroom, c.want)
		}
	}

	for _, args := range [][]string{
		{"--gc-min-headroom", "-1"},
		{"--gc-min-headroom=-64mb"},
		{"--gc-min-headroom", "lots"},
	} {
		_, err := parseFlags(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "gc-min-headroom") || !strings.Contains(err.Error(), "want a size in bytes") {
			t.Errorf("%v: error %v, want one naming gc-min-headroom and wanting a size in bytes", args, err)
		}
	}
	path := writeConfig(t, "gc-min-headroom -1\n")
	if _, err := parseFlags([]string{"--config", path}, io.Discard); err == nil || !strings.Contains(err.Error(), path+`:1: bad value "-1" for gc-min-headroom`) {
		t.Errorf("negative in the configuration file: %v", err)
	}

	// The check behind the flag, for a value set some other way.
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.GCMinHeadroom = -1
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "--gc-min-headroom: want 0 (off) or a size in bytes, got -1") {
		t.Errorf("validate with a negative headroom: %v", err)
	}
}

// TestDurabilityFlags: --raft-log and --fsync (also spelled --appendfsync,
// and appendfsync or fsync in the configuration file) take their words,
// always by default, --raft-log unset by default (the data dir's store, else
// wal: TestDurabilityAtStartup); anything else is refused naming the setting
// and the words it takes.
func TestDurabilityFlags(t *testing.T) {
	for _, c := range []struct {
		args         []string
		store, fsync string
	}{
		{nil, "", "always"},
		{[]string{"--raft-log", "wal"}, "wal", "always"},
		{[]string{"--raft-log=BOLT", "--fsync", "everysec"}, "bolt", "everysec"},
		{[]string{"--fsync", "no"}, "", "no"},
		{[]string{"--appendfsync", "everysec"}, "", "everysec"},
		{[]string{"--config", writeConfig(t, "appendfsync everysec\nraft-log wal\n")}, "wal", "everysec"},
		{[]string{"--config", writeConfig(t, "fsync no\n")}, "", "no"},
		{[]string{"--config", writeConfig(t, "appendfsync everysec\n"), "--fsync", "always"}, "", "always"},
	} {
		cfg, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if cfg.RaftLog.value != c.store || cfg.Fsync.value != c.fsync {
			t.Errorf("%v: --raft-log %s --fsync %s, want %s %s", c.args, cfg.RaftLog.value, cfg.Fsync.value, c.store, c.fsync)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--raft-log", "lsm"}, `invalid value "lsm" for flag -raft-log: want bolt or wal, got "lsm"`},
		{[]string{"--fsync", "sometimes"}, `invalid value "sometimes" for flag -fsync: want always, everysec or no, got "sometimes"`},
		{[]string{"--appendfsync", ""}, `invalid value "" for flag -appendfsync: want always, everysec or no, got ""`},
	} {
		_, err := parseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
	path := writeConfig(t, "\nappendfsync always-ish\n")
	if _, err := parseFlags([]string{"--config", path}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), path+`:2: bad value "always-ish" for appendfsync: want always, everysec or no`) {
		t.Errorf("bad appendfsync in the configuration file: %v", err)
	}

	// The check behind the flags, for values set some other way.
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RaftLog.value, cfg.Fsync.value = "lsm", "never"
	err = cfg.validate()
	for _, want := range []string{`--raft-log: want bolt or wal, got "lsm"`, `--fsync: want always, everysec or no, got "never"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v, want %q", err, want)
		}
	}
}

// TestShardFlags: --lock-stripes is the engine's lock stripes (what
// --shards used to name); --shards is the Raft group count, 1 for now, and
// anything else is refused with a message that names the new flag;
// --redirect needs a cluster.
func TestShardFlags(t *testing.T) {
	peers := []string{"--id", "n1", "--peers", "n1=127.0.0.1:7001,n2=127.0.0.1:7002,n3=127.0.0.1:7003"}
	for _, c := range []struct {
		args            []string
		stripes, shards int
		redirect        bool
	}{
		{nil, 256, 1, false},
		{[]string{"--lock-stripes", "64"}, 64, 1, false},
		{[]string{"--shards", "1"}, 256, 1, false},
		{append([]string{"--shards", "3"}, peers...), 256, 3, false},
		{[]string{"--shards", "64"}, 256, 64, false}, // a durable single node may run several groups
		{[]string{"--config", writeConfig(t, "lock-stripes 1024\nshards 1\n")}, 1024, 1, false},
		{append([]string{"--redirect"}, peers...), 256, 1, true},
	} {
		cfg, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		if cfg.LockStripes != c.stripes || cfg.Shards != c.shards || cfg.Redirect != c.redirect {
			t.Errorf("%v: stripes %d shards %d redirect %v, want %d %d %v", c.args, cfg.LockStripes, cfg.Shards, cfg.Redirect, c.stripes, c.shards, c.redirect)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "256"}, "--shards: want 1 to 64 Raft groups, got 256 (the engine's lock stripes, which --shards used to name, are --lock-stripes)"},
		{[]string{"--shards", "0"}, "--shards: want 1 to 64 Raft groups, got 0"},
		{[]string{"--shards", "2", "--in-memory"}, "--shards: a single node in memory runs no Raft group"},
		{[]string{"--lock-stripes", "0"}, "--lock-stripes: want 1 to 65536, got 0"},
		{[]string{"--redirect"}, "--redirect: needs --peers"},
	} {
		_, err := parseFlags(c.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}

// TestAdvertisedRESP: a node bound to every interface announces its RESP
// port on its Raft host, which the other nodes (and so clients told by
// CLUSTER SLOTS) can reach.
func TestAdvertisedRESP(t *testing.T) {
	for _, c := range []struct{ resp, raft, want string }{
		{"127.0.0.1:6001", "127.0.0.1:7001", "127.0.0.1:6001"},
		{"0.0.0.0:6001", "10.0.0.5:7001", "10.0.0.5:6001"},
		{"[::]:6001", "10.0.0.5:7001", "10.0.0.5:6001"},
		{":6001", "[fd00::5]:7001", "[fd00::5]:6001"},
		{"0.0.0.0:6001", "0.0.0.0:7001", "0.0.0.0:6001"},
		{"10.0.0.9:6001", "10.0.0.5:7001", "10.0.0.9:6001"},
	} {
		if got := advertisedRESP(c.resp, c.raft); got != c.want {
			t.Errorf("advertisedRESP(%q, %q) = %q, want %q", c.resp, c.raft, got, c.want)
		}
	}
}
