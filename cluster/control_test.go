package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/internal/testkit"
)

// ctlSamples holds a request and a reply of every method of the table, by
// name, for the round trips of TestControlMethodTable.
var ctlSamples = map[string]struct{ req, rep any }{
	"announce": {announceReq{codec.Leader{ID: "n2", RESP: "127.0.0.1:6379", Forward: "127.0.0.1:8300"}}, none{}},
	"version":  {versionReq{id: "n2", version: 3}, uint64(3)},
	"member":   {memberReq{op: opJoin, id: "n4", raftAddr: "127.0.0.1:7004"}, uint64(42)},
}

// roundTrip encodes and decodes a sample request and reply of m.
func roundTrip[Req handler[Rep], Rep any](t *testing.T, m *method[Req, Rep], req, rep any) {
	t.Helper()
	r, ok := req.(Req)
	if !ok {
		t.Fatalf("%s: the sample request is a %T", m.name, req)
	}
	p := m.putReq(nil, r)
	if len(p) > m.maxReq {
		t.Errorf("%s: a sample request of %d bytes exceeds the row's cap %d", m.name, len(p), m.maxReq)
	}
	d := codec.NewDecoder(p)
	if got := m.getReq(&d); d.Err != nil || len(d.B) != 0 || !reflect.DeepEqual(got, r) {
		t.Errorf("%s: request %+v decodes as %+v (%v, %d stray bytes)", m.name, r, got, d.Err, len(d.B))
	}
	y, ok := rep.(Rep)
	if !ok {
		t.Fatalf("%s: the sample reply is a %T", m.name, rep)
	}
	p = m.putRep(nil, y)
	if len(p) > m.maxRep {
		t.Errorf("%s: a sample reply of %d bytes exceeds the row's cap %d", m.name, len(p), m.maxRep)
	}
	d = codec.NewDecoder(p)
	if got := m.getRep(&d); d.Err != nil || len(d.B) != 0 || !reflect.DeepEqual(got, y) {
		t.Errorf("%s: reply %+v decodes as %+v (%v)", m.name, y, got, d.Err)
	}
}

// TestControlMethodTable: every row of the method table has a number and
// a name of its own, caps and a limit, a legacy hello of its own (or
// none), request and reply codecs that round-trip its sample, and a line
// in docs/design.md's table of methods. (A row without a handler does not
// compile: the handler is its request type's serve method.)
func TestControlMethodTable(t *testing.T) {
	design, err := os.ReadFile("../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	nums, names, hellos := map[uint64]bool{}, map[string]bool{}, map[string]bool{ctlHello: true, forward.Hello: true, forward.GroupHello: true}
	for _, m := range ctlMethods {
		i := m.info()
		if i.num == 0 || nums[i.num] || i.name == "" || names[i.name] {
			t.Errorf("method %d %q: a number and a name of its own, please", i.num, i.name)
		}
		nums[i.num], names[i.name] = true, true
		if i.maxReq <= 0 || i.maxReq > maxUnknownBody<<4 || i.limit == nil {
			t.Errorf("%s: caps %d/%d, limit set %v", i.name, i.maxReq, i.maxRep, i.limit != nil)
		}
		if w := i.legacy; w.reply != noLegacy {
			if len(w.hello) != len(forward.Hello) || hellos[w.hello] {
				t.Errorf("%s: legacy hello %q is not a hello of its own", i.name, w.hello)
			}
			hellos[w.hello] = true
		}
		if methodByNum(i.num) != m {
			t.Errorf("%s: methodByNum(%d) finds another row", i.name, i.num)
		}
		s, ok := ctlSamples[i.name]
		if !ok {
			t.Errorf("%s: no sample in ctlSamples", i.name)
			continue
		}
		switch m := m.(type) {
		case *method[announceReq, none]:
			roundTrip(t, m, s.req, s.rep)
		case *method[versionReq, uint64]:
			roundTrip(t, m, s.req, s.rep)
		case *method[memberReq, uint64]:
			roundTrip(t, m, s.req, s.rep)
		default:
			t.Errorf("%s: a row of type %T: add its case here", i.name, m)
		}
		if !strings.Contains(string(design), "| `"+i.name+"` | "+strconv.FormatUint(i.num, 10)+" |") {
			t.Errorf("%s: docs/design.md's table of control methods has no row \"| `%s` | %d |\"", i.name, i.name, i.num)
		}
	}
}

// TestCallTimeout: one deadline rule on both ends: what the caller asked,
// at most the method's limit, the limit when it asked for nothing.
func TestCallTimeout(t *testing.T) {
	n := &Node{cfg: Config{ClusterTimeout: 2 * time.Second}}
	for _, tc := range []struct {
		m     *methodInfo
		asked time.Duration
		want  time.Duration
	}{
		{&versionMethod.methodInfo, 0, time.Second},
		{&versionMethod.methodInfo, 300 * time.Millisecond, 300 * time.Millisecond},
		{&versionMethod.methodInfo, time.Hour, time.Second},
		{&announceMethod.methodInfo, 0, 3 * time.Second},
		{&memberMethod.methodInfo, 10 * time.Minute, 10 * time.Minute},
		{&memberMethod.methodInfo, time.Hour, maxMemberTimeout},
		{&memberMethod.methodInfo, -time.Second, maxMemberTimeout},
	} {
		if got := tc.m.callTimeout(n, tc.asked); got != tc.want {
			t.Errorf("%s asked %v: %v, want %v", tc.m.name, tc.asked, got, tc.want)
		}
	}
}

// ctlConn is a raw connection to a node's forward listener on the
// control channel.
type ctlConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialCtl(t *testing.T, n *Node) *ctlConn {
	c, err := n.cfg.Network.Dial(n.fwdAddr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(ctlHello)); err != nil {
		t.Fatal(err)
	}
	return &ctlConn{t: t, c: c, br: bufio.NewReader(c)}
}

// send writes a request; a negative length sends that header and no body.
func (cc *ctlConn) send(id, num uint64, ms uint64, body []byte) {
	p := binary.AppendUvarint(nil, id)
	p = binary.AppendUvarint(p, num)
	p = binary.AppendUvarint(p, ms)
	if _, err := cc.c.Write(append(p, peer.Frame(body)...)); err != nil {
		cc.t.Fatal(err)
	}
}

// reply reads a reply: its id, status, and body or coded error.
func (cc *ctlConn) reply() (uint64, byte, []byte, error) {
	cc.t.Helper()
	id, err := binary.ReadUvarint(cc.br)
	if err != nil {
		cc.t.Fatalf("reading a reply: %v", err)
	}
	status, err := cc.br.ReadByte()
	if err != nil {
		cc.t.Fatal(err)
	}
	body, err := peer.ReadFrame(cc.br, maxErrReply)
	if err != nil {
		cc.t.Fatal(err)
	}
	b, st, rerr := decodeStatus(status, body)
	if st != status {
		cc.t.Fatalf("reply %d: status %d's body does not decode: %v", id, status, rerr)
	}
	return id, status, b, rerr
}

// TestControlChannel: calls on one connection of the channel, answered in
// order with their ids, coded errors included; an unknown method gets a
// coded error and the connection goes on; a body over its method's cap is
// refused before it is sent, and the connection closed.
func TestControlChannel(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	if !n.speaksControl() {
		t.Fatalf("a new cluster runs version %d: below the channel's", n.fsm.clusterVersion())
	}
	raftAddr := tc.cfgs[0].RaftAddr
	cc := dialCtl(t, n)
	for _, step := range []struct {
		name   string
		id     uint64
		num    uint64
		body   []byte
		status byte
		check  func(body []byte, err error) bool
	}{
		{"version", 1, versionMethod.num, versionMethod.putReq(nil, versionReq{id: "x", version: 2}), forward.StatusOK,
			func(b []byte, _ error) bool {
				return string(b) == string(binary.AppendUvarint(nil, uint64(SupportedVersion)))
			}},
		{"unknown method", 7, 99, []byte("whatever"), forward.StatusError,
			func(_ []byte, err error) bool {
				e := errcode.Of(err)
				return e != nil && e.Code == errcode.Internal && strings.Contains(e.Detail, "unknown control method 99")
			}},
		{"coded error", 8, memberMethod.num, memberMethod.putReq(nil, memberReq{op: opJoin, id: "n9", raftAddr: raftAddr}), forward.StatusError,
			func(_ []byte, err error) bool { return errcode.Is(err, errcode.MemberConflict) }},
		{"malformed", 9, announceMethod.num, []byte{0xff}, forward.StatusError,
			func(_ []byte, err error) bool { return err != nil && strings.Contains(err.Error(), "malformed") }},
		{"progress", 10, memberMethod.num, memberMethod.putReq(nil, memberReq{op: opProgress, id: n.cfg.ID}), forward.StatusOK,
			func(b []byte, _ error) bool { d := codec.NewDecoder(b); return d.Uvarint() > 0 && d.Err == nil }},
	} {
		cc.send(step.id, step.num, 1000, step.body)
		id, status, body, err := cc.reply()
		if id != step.id || status != step.status || !step.check(body, err) {
			t.Errorf("%s: reply %d, status %d, %q, %v", step.name, id, status, body, err)
		}
	}

	// Over the cap: the header and the frame's length alone are answered.
	p := binary.AppendUvarint(nil, 11)
	p = binary.AppendUvarint(p, versionMethod.num)
	p = binary.AppendUvarint(p, 1000)
	p = binary.AppendUvarint(p, uint64(versionMethod.maxReq+1))
	if _, err := cc.c.Write(p); err != nil {
		t.Fatal(err)
	}
	if id, status, _, err := cc.reply(); id != 11 || status != forward.StatusError || !errcode.Is(err, errcode.Internal) {
		t.Errorf("oversized request: reply %d, status %d, %v", id, status, err)
	}
	if _, err := cc.br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("the connection stays open after an oversized request: %v", err)
	}
}

// TestControlDeadline: the handler runs under the deadline rule
// (callTimeout) of what the caller asked; a caller past its deadline sends
// nothing.
func TestControlDeadline(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	s := &ctlServer{log: testLogger(t)}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	for _, tc := range []struct {
		asked time.Duration
		want  time.Duration
	}{{50 * time.Millisecond, 50 * time.Millisecond}, {0, time.Second}, {time.Minute, time.Second}} {
		var left time.Duration
		d := codec.NewDecoder(nil)
		start := time.Now()
		status, _, err := s.runCall(context.Background(), n, c1, &versionMethod.methodInfo, func(ctx context.Context, _ *Node) ([]byte, error) {
			dl, ok := ctx.Deadline()
			if !ok {
				return nil, errors.New("no deadline")
			}
			left = dl.Sub(start)
			return nil, nil
		}, &d, tc.asked)
		if status != forward.StatusOK || err != nil || left > tc.want+50*time.Millisecond || left < tc.want-50*time.Millisecond {
			t.Errorf("asked %v: the handler's deadline %v away (want %v), status %d, %v", tc.asked, left, tc.want, status, err)
		}
	}
	// End to end: a call whose context ends before it was sent fails at
	// once, unanswered.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, status, err := call(ctx, n, n.fwdAddr, versionMethod, versionReq{id: "x", version: 3}); status != forward.StatusRetry || !errors.Is(err, errNoAnswer) {
		t.Errorf("a call past its deadline: status %d, %v", status, err)
	}
}

// TestLegacyClientAgainstNewServer: a node of an older release calls with
// the legacy hellos, one call per connection, and gets the legacy replies.
func TestLegacyClientAgainstNewServer(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	legacy := func(hello string, payload []byte) []byte {
		c, err := n.cfg.Network.Dial(n.fwdAddr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(append([]byte(hello), peer.Frame(payload)...)); err != nil {
			t.Fatal(err)
		}
		reply, err := peer.ReadFrame(bufio.NewReader(c), 4<<10)
		if err != nil {
			t.Fatalf("%q: %v", hello, err)
		}
		return reply
	}
	// v0.2.0's version exchange: the bare supported version.
	p := binary.AppendUvarint(codec.AppendStr(nil, []byte("old")), 2)
	if got := legacy("SLFV\x01", p); string(got) != string(binary.AppendUvarint(nil, uint64(SupportedVersion))) {
		t.Errorf("SLFV reply %q", got)
	}
	// v0.2.0's membership step: status 0 and the applied index.
	p = append([]byte{byte(opProgress)}, codec.AppendStr(codec.AppendStr(nil, []byte(n.cfg.ID)), nil)...)
	p = binary.AppendUvarint(p, 1000)
	if got := legacy("SLFM\x01", p); len(got) < 2 || got[0] != forward.StatusOK {
		t.Errorf("SLFM progress reply %q", got)
	}
	// ... and a coded error.
	p = append([]byte{byte(opJoin)}, codec.AppendStr(codec.AppendStr(nil, []byte("n9")), []byte(tc.cfgs[0].RaftAddr))...)
	p = binary.AppendUvarint(p, 1000)
	got := legacy("SLFM\x01", p)
	d := codec.NewDecoder(got[1:])
	if err := d.CodedError(sentinels); got[0] != forward.StatusError || !errcode.Is(err, errcode.MemberConflict) {
		t.Errorf("SLFM join conflict reply %q: %v", got, err)
	}
	// v0.1.0's announcement: status 0, no text.
	e := codec.Leader{ID: n.cfg.ID, RESP: n.cfg.RESPAddr, Forward: n.fwdAddr}
	if got := legacy("SLFA\x01", announceMethod.putReq(nil, announceReq{e})); string(got) != "\x00" {
		t.Errorf("SLFA reply %q", got)
	}
	// This build's client in the legacy framing gets the same answers.
	for _, m := range []*methodInfo{&versionMethod.methodInfo, &memberMethod.methodInfo} {
		body := versionMethod.putReq(nil, versionReq{id: "x", version: 3})
		if m == &memberMethod.methodInfo {
			body = memberMethod.putReq(nil, memberReq{op: opProgress, id: n.cfg.ID})
		}
		if b, status, err := n.callRaw(context.Background(), n.fwdAddr, m, body, true); status != forward.StatusOK || err != nil || len(b) == 0 {
			t.Errorf("%s in the legacy framing: %q, status %d, %v", m.name, b, status, err)
		}
	}
}

// TestNewClientAgainstLegacyServer: a node whose group runs a version
// below the channel's calls in the legacy framing, which a node of an
// older release (here a fake that knows only the legacy hellos and drops
// any other, as v0.2.0 does) answers; at the channel's version it would
// not.
func TestNewClientAgainstLegacyServer(t *testing.T) {
	// Over TCP: the fake old node below is a real listener.
	th := startHosts(t, 1, hostsOpt{tcp: true, config: func(_ int, c *Config) {
		c.bootstrapVersion = BaseVersion
		c.advertiseVersion = 2 // an upgrade from v0.2.0 under way
	}})
	n := th.hosts[0].nodes[0]
	waitFor(t, 10*time.Second, func() error {
		if v := n.fsm.clusterVersion(); v != 2 {
			return errors.New("not at version 2 yet")
		}
		return nil
	})
	old := testkit.Serve(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		var hello [5]byte
		if _, err := io.ReadFull(br, hello[:]); err != nil || legacyMethod(string(hello[:])) == nil {
			return // v0.2.0 drops a connection with a hello it does not know
		}
		p, err := peer.ReadFrame(br, 4<<10)
		if err != nil {
			return
		}
		switch string(hello[:]) {
		case "SLFV\x01":
			_, _ = c.Write(peer.Frame(binary.AppendUvarint(nil, 2)))
		case "SLFA\x01":
			_, _ = c.Write(peer.Frame([]byte{forward.StatusRetry, 'n', 'o'}))
		case "SLFM\x01":
			d := codec.NewDecoder(p)
			if memberOp(d.Byte()) == opProgress {
				_, _ = c.Write(peer.Frame(binary.AppendUvarint([]byte{forward.StatusOK}, 42)))
			} else {
				_, _ = c.Write(peer.Frame(codec.AppendError([]byte{forward.StatusError}, &errcode.Error{Code: errcode.RemoveUnsafe, Detail: "n1"})))
			}
		}
	}).Addr().String()

	if v, err := n.exchangeVersion(old); v != 2 || err != nil {
		t.Errorf("version poll of an old node: %d, %v", v, err)
	}
	if err := n.announce(old, codec.Leader{ID: "n1", RESP: "127.0.0.1:1", Forward: "127.0.0.1:2"}); err == nil || !strings.Contains(err.Error(), "replied 2: no") {
		t.Errorf("announce to an old node that is not the leader: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if v, status, err := call(ctx, n, old, memberMethod, memberReq{op: opProgress, id: "n2"}); v != 42 || status != forward.StatusOK || err != nil {
		t.Errorf("progress of an old node: %d, %d, %v", v, status, err)
	}
	if _, status, err := call(ctx, n, old, memberMethod, memberReq{op: opRemove, id: "n1"}); status != forward.StatusError || !errcode.Is(err, errcode.RemoveUnsafe) {
		t.Errorf("a coded error from an old node: %d, %v", status, err)
	}
	// The channel's framing, which only a group at the channel's version
	// sends, is dropped by an old node: no answer.
	body := versionMethod.putReq(nil, versionReq{id: "x", version: 3})
	if _, status, err := n.callRaw(ctx, old, &versionMethod.methodInfo, body, false); status != forward.StatusRetry || !errors.Is(err, errNoAnswer) {
		t.Errorf("the channel to an old node: status %d, %v", status, err)
	}
}

// TestControlCallerHangsUp: a caller that hangs up ends the call it waits
// for, on the channel and in the legacy framing alike (a join that would
// wait for a non-voter that never catches up).
func TestControlCallerHangsUp(t *testing.T) {
	tc := newTestCluster(t, 1, nil)
	n := tc.nodes[0]
	for i, legacy := range []bool{false, true} {
		body := memberMethod.putReq(nil, memberReq{op: opJoin, id: "n" + strconv.Itoa(9+i), raftAddr: "127.0.0.1:" + strconv.Itoa(1+i)})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, _, err := n.callRaw(ctx, n.fwdAddr, &memberMethod.methodInfo, body, legacy)
			done <- err
		}()
		waitFor(t, 10*time.Second, func() error {
			if n.membership.busy.Load() == 0 {
				return errors.New("the join step has not started")
			}
			return nil
		})
		cancel()
		if err := <-done; !errors.Is(err, errNoAnswer) {
			t.Errorf("legacy %v: a canceled call: %v", legacy, err)
		}
		waitFor(t, 10*time.Second, func() error {
			if b := n.membership.busy.Load(); b != 0 {
				return fmt.Errorf("legacy %v: %d steps still running after their caller hung up", legacy, b)
			}
			return nil
		})
	}
}
