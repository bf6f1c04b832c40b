package main

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDebugFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		rest    []string
		want    debugConfig
		wantErr string
	}{
		{name: "none", args: []string{"--addr", "127.0.0.1:1"}, rest: []string{"--addr", "127.0.0.1:1"}},
		{name: "skew with =", args: []string{"--debug-clock-skew=3s", "--in-memory"},
			rest: []string{"--in-memory"}, want: debugConfig{ClockSkew: 3 * time.Second}},
		{name: "negative skew, one dash", args: []string{"-debug-clock-skew", "-2500ms"},
			rest: []string{}, want: debugConfig{ClockSkew: -2500 * time.Millisecond}},
		{name: "dial map", args: []string{"--debug-dial-map", "127.0.0.1:7002=127.0.0.1:9002,127.0.0.1:8002=127.0.0.1:9102", "--id", "n1"},
			rest: []string{"--id", "n1"},
			want: debugConfig{DialMap: map[string]string{"127.0.0.1:7002": "127.0.0.1:9002", "127.0.0.1:8002": "127.0.0.1:9102"}}},
		{name: "after --", args: []string{"--", "--debug-clock-skew=1s"}, rest: []string{"--", "--debug-clock-skew=1s"}},
		{name: "missing value", args: []string{"--debug-clock-skew"}, wantErr: "needs a value"},
		{name: "bad duration", args: []string{"--debug-clock-skew=3"}, wantErr: "missing unit"},
		{name: "skew beyond an hour", args: []string{"--debug-clock-skew=2h"}, wantErr: "beyond an hour"},
		{name: "bad map", args: []string{"--debug-dial-map=127.0.0.1:7002"}, wantErr: "not from=to"},
		{name: "bad address", args: []string{"--debug-dial-map=a=127.0.0.1:9"}, wantErr: "missing port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d debugConfig
			rest, err := d.extract(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rest, tc.rest) && !(len(rest) == 0 && len(tc.rest) == 0) {
				t.Fatalf("rest %q, want %q", rest, tc.rest)
			}
			if !reflect.DeepEqual(d, tc.want) {
				t.Fatalf("got %+v, want %+v", d, tc.want)
			}
		})
	}
}

// TestDebugFlagsHidden: the hidden flags parse, and --help does not show
// them.
func TestDebugFlagsHidden(t *testing.T) {
	var help strings.Builder
	_, _ = parseFlags([]string{"--help"}, &help)
	if strings.Contains(help.String(), "debug-") && strings.Contains(help.String(), "skew") {
		t.Fatalf("--help shows a hidden flag:\n%s", help.String())
	}
	c, err := parseFlags([]string{"--debug-clock-skew", "3s", "--in-memory"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ClockSkew != 3*time.Second || !c.InMemory {
		t.Fatalf("skew %v in-memory %v", c.ClockSkew, c.InMemory)
	}
	if now := c.wallClock()(); now-time.Now().UnixNano() < int64(2*time.Second) {
		t.Fatalf("skewed clock %d is not 3s ahead", now)
	}
}
