package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRLSFlags: the --rls-* settings are checked and named.
func TestRLSFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "x.yaml")
	if err := os.WriteFile(file, []byte("domain: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string // "" for no error
	}{
		{[]string{"--rls-config", dir, "--rls-addr", "127.0.0.1:8081", "--rls-http-addr", "127.0.0.1:8080", "--rls-shadow"}, ""},
		{[]string{"--rls-config", dir}, ""},
		{[]string{"--rls-addr", "127.0.0.1:8081"}, "--rls-config: required with"},
		{[]string{"--rls-shadow"}, "--rls-config: required with"},
		{[]string{"--rls-response-headers"}, "--rls-config: required with"},
		{[]string{"--rls-config", file}, "is not a directory"},
		{[]string{"--rls-config", filepath.Join(dir, "nope")}, "--rls-config: stat"},
		{[]string{"--rls-config", dir, "--rls-addr", "nope"}, "--rls-addr: address nope: missing port"},
		{[]string{"--rls-config", dir, "--rls-addr", "0.0.0.0:8081"}, "--rls-addr: DENIED listening on 0.0.0.0:8081 beyond loopback"},
		{[]string{"--rls-config", dir, "--rls-addr", "0.0.0.0:8081", "--protected-mode", "no"}, ""},
		{[]string{"--rls-config", dir, "--rls-tls-cert-file", file}, "--rls-tls-cert-file: --rls-tls-cert-file and --rls-tls-key-file go together"},
		{[]string{"--rls-config", dir, "--rls-tls-ca-cert-file", file}, "--rls-tls-ca-cert-file: needs --rls-tls-cert-file"},
	} {
		_, err := parseFlags(c.args, io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}
