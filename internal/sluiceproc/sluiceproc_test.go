package sluiceproc

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLayoutPeersArgs(t *testing.T) {
	port := 7000
	nodes, err := Layout(3, "/data", func() (string, error) {
		port++
		return fmt.Sprintf("127.0.0.1:%d", port), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Peers(nodes), "n1=127.0.0.1:7002,n2=127.0.0.1:7005,n3=127.0.0.1:7008"; got != want {
		t.Fatalf("Peers = %q, want %q", got, want)
	}
	nodes[1].Extra = []string{"--redirect"}
	tests := []struct {
		nd   *Node
		fwd  bool
		want string
	}{
		{nodes[0], true, "--id n1 --addr 127.0.0.1:7001 --raft-addr 127.0.0.1:7002 --forward-addr 127.0.0.1:7003 --data-dir /data/n1 --peers P --log-level warn"},
		{nodes[1], true, "--id n2 --addr 127.0.0.1:7004 --raft-addr 127.0.0.1:7005 --forward-addr 127.0.0.1:7006 --data-dir /data/n2 --peers P --log-level warn --redirect"},
		{nodes[2], false, "--id n3 --addr 127.0.0.1:7007 --raft-addr 127.0.0.1:7008 --data-dir /data/n3 --peers P --log-level warn"},
	}
	for _, tc := range tests {
		if !tc.fwd {
			tc.nd.Fwd = ""
		}
		if got := strings.Join(tc.nd.Args("P", "--log-level", "warn"), " "); got != tc.want {
			t.Errorf("%s: Args = %q, want %q", tc.nd.ID, got, tc.want)
		}
	}
	boom := errors.New("no port")
	if _, err := Layout(2, "/d", func() (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Fatalf("Layout with a failing addr: %v, want %v", err, boom)
	}
}

func TestProcessStopKill(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	tests := []struct {
		name   string
		script string
		end    func(p *Process) error
		killed bool // Stop had to kill it
	}{
		// exec: no child of sh may hold the output pipe open.
		{"stop", "exec sleep 60", func(p *Process) error { return p.Stop(10 * time.Second) }, false},
		{"stop-ignores-term", "trap '' TERM; exec sleep 60", func(p *Process) error { return p.Stop(300 * time.Millisecond) }, true},
		{"kill", "trap '' TERM; exec sleep 60", func(p *Process) error { p.Kill(); return nil }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			p, err := Start(tc.name, sh, []string{"-c", "echo up; " + tc.script}, Options{Output: &out, DieWithParent: true})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Exited():
				t.Fatalf("exited at once: %v", p.Err())
			case <-time.After(100 * time.Millisecond):
			}
			err = tc.end(p)
			if (err != nil) != tc.killed {
				t.Fatalf("end: %v, want killed %v", err, tc.killed)
			}
			select {
			case <-p.Exited():
			default:
				t.Fatal("not exited after the end")
			}
			if p.Err() == nil {
				t.Fatal("a signalled process exited cleanly")
			}
			if !slices.Contains(strings.Fields(out.String()), "up") {
				t.Fatalf("output %q", out.String())
			}
			if err := p.Stop(time.Second); err != nil {
				t.Fatalf("Stop after exit: %v", err)
			}
		})
	}
}

// TestServing: a node serves when DBSIZE answers without an error.
func TestServing(t *testing.T) {
	tests := []struct {
		name, reply string
		wantErr     string // empty: serving
	}{
		{"answers", ":0\r\n", ""},
		{"refuses", "-CLUSTERDOWN no leader\r\n", "CLUSTERDOWN no leader"},
		{"bulk error", "!5\r\nNOPE!\r\n", "NOPE!"},
		{"silent", "", "timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				buf := make([]byte, 64)
				if _, err := c.Read(buf); err == nil && tc.reply != "" {
					_, _ = c.Write([]byte(tc.reply))
				}
				_, _ = c.Read(buf) // until the client closes
			}()
			err = Serving(ln.Addr().String(), 300*time.Millisecond)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Serving: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Serving: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
	if err := Serving("127.0.0.1:1", 300*time.Millisecond); err == nil {
		t.Fatal("Serving on a closed port succeeded")
	}
}
