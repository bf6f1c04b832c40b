// Package sluiceproc starts sluice binaries (and other servers) as
// processes, for the process tests of cmd/sluice, the benchmark tool's
// targets and the chaos suite: the layout of a cluster's nodes (ids,
// addresses, data directories, --peers), the flags every node takes, and a
// started process that can be stopped (SIGTERM, then SIGKILL), killed or
// signalled, and started again on the same layout.
//
// A whole cluster of them (restarts, partitions through link proxies,
// replacements) is internal/testkit/proccluster, built on this package.
// What is particular to one user stays with it: the chaos suite's nemesis,
// the benchmark's probes and CPU accounting, the tests' clients.
package sluiceproc

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/internal/freeport"
	"github.com/sluice-rl/sluice/internal/respwire"
)

// Node is one sluice node: its id, addresses and data directory, which
// stay the same across restarts.
type Node struct {
	// ID is the node's --id: n1, n2, ...
	ID string
	// RESP, Raft and Fwd are its --addr, --raft-addr and --forward-addr
	// (host:port). An empty Fwd omits --forward-addr.
	RESP, Raft, Fwd string
	// Dir is its --data-dir.
	Dir string
	// Extra are more flags for this node alone (a --debug-dial-map...),
	// given after the common ones.
	Extra []string
}

// FreeAddr returns 127.0.0.1:port on a port that was free a moment ago,
// below the ephemeral range (see internal/freeport).
func FreeAddr() (string, error) {
	ports, err := freeport.Ports(1)
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0]), nil
}

// Layout returns n nodes, n1 to nN, whose data directories are base/n1 to
// base/nN and whose RESP, Raft and forward addresses (in that order, node
// by node) come from addr.
func Layout(n int, base string, addr func() (string, error)) ([]*Node, error) {
	nodes := make([]*Node, 0, n)
	for i := 1; i <= n; i++ {
		nd := &Node{ID: fmt.Sprintf("n%d", i), Dir: filepath.Join(base, fmt.Sprintf("n%d", i))}
		for _, a := range []*string{&nd.RESP, &nd.Raft, &nd.Fwd} {
			s, err := addr()
			if err != nil {
				return nil, err
			}
			*a = s
		}
		nodes = append(nodes, nd)
	}
	return nodes, nil
}

// Peers is the --peers value of a cluster of nodes: id=raft-addr, ...
func Peers(nodes []*Node) string {
	peers := make([]string, len(nodes))
	for i, nd := range nodes {
		peers[i] = nd.ID + "=" + nd.Raft
	}
	return strings.Join(peers, ",")
}

// Args are the flags that make nd a member of the cluster whose --peers
// value is peers: --id, --addr, --raft-addr, --forward-addr (when Fwd is
// set), --data-dir and --peers, then common, then nd's Extra.
func (nd *Node) Args(peers string, common ...string) []string {
	args := []string{"--id", nd.ID, "--addr", nd.RESP, "--raft-addr", nd.Raft}
	if nd.Fwd != "" {
		args = append(args, "--forward-addr", nd.Fwd)
	}
	args = append(args, "--data-dir", nd.Dir, "--peers", peers)
	args = append(args, common...)
	return append(args, nd.Extra...)
}

// Options vary how Start starts a process.
type Options struct {
	// Dir is the working directory (default: this process's).
	Dir string
	// Output receives the process's stdout and stderr (default: dropped).
	Output io.Writer
	// DieWithParent kills the process (SIGKILL) when this one ends, however
	// it ends (Linux only; elsewhere it is ignored).
	DieWithParent bool
}

// Process is a started process. Its exit is reaped in the background:
// Exited is closed when it has exited, and then Err says how.
type Process struct {
	// Name names the process in errors.
	Name string
	// Cmd is the started command.
	Cmd *exec.Cmd

	exited chan struct{}
	err    error
}

// Start starts bin with args.
func Start(name, bin string, args []string, opt Options) (*Process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = opt.Dir
	cmd.Stdout, cmd.Stderr = opt.Output, opt.Output
	if opt.DieWithParent {
		cmd.SysProcAttr = dieWithParent()
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is how the process exited (cmd.Wait's error); valid once Exited is
// closed.
func (p *Process) Err() error { return p.err }

// Pid is the process's id.
func (p *Process) Pid() int { return p.Cmd.Process.Pid }

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", p.Name, err)
	}
	return nil
}

// Kill sends SIGKILL (a crash) and waits for the process to go.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Stop sends SIGTERM and waits for the process to go; after timeout it
// kills it (SIGKILL) and says so.
func (p *Process) Stop(timeout time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		p.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM; killed", p.Name, timeout)
	}
}

// Serving asks the node at addr for DBSIZE, a read that goes through the
// replicated log (so a leader answers it only with a quorum), on a fresh
// connection within timeout, and returns nil if it answers without an
// error: the node serves.
func Serving(addr string, timeout time.Duration) error {
	v, err := respwire.DoAt(addr, timeout, "DBSIZE")
	if err != nil {
		return err
	}
	if v.Error() != "" {
		return errors.New(v.Str)
	}
	return nil
}
