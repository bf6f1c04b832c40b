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
