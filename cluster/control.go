package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/peer"
	"github.com/sluice-rl/sluice/internal/errcode"
)

// The control channel: every message between nodes other than Raft's own
// and forwarding (address announcements, the version poll, membership
// steps, and whatever comes next) is a method of one typed call on the
// forward listener, etcd's and Consul's RPC layers being the models
// (docs/design.md, "The control channel"). A method is one row of the
// method table (controlmethods.go): its number, name, request and reply
// types with their codecs, the caps of its frames, the longest a call may
// last, its legacy hello, and its handler, the serve method of its request
// type. One client (call) and one server loop (serveControl) carry them
// all, with one framing, one deadline rule (callTimeout), one frame cap
// rule (the row's, checked before a frame is read) and one coded-error
// reply (codec.AppendError: codes from internal/errcode, rendered to text
// only by resp).
//
// Wire format, after the group hello (if any) and "SLFC\x01":
//
//	request = uvarint id | uvarint method | uvarint timeout (ms) | frame(body)
//	reply   = uvarint id | status byte | frame(body)
//	status  = 0 ok (body: the method's reply) | 1 error (body: codec.AppendError)
//	        | 2 not done here, route again (body: codec.AppendError, the reason)
//
// A connection carries any number of calls, answered in order with the
// request's id. A request naming a method this node does not know is
// answered with a coded error (its body, at most maxUnknownBody bytes, is
// read and dropped) and the connection goes on; a body over its method's
// cap is refused with a coded error before it is read, and the connection
// closed. A caller that hangs up ends the call it is waiting for.
//
// Rolling upgrades: nodes of v0.2.0 and before (and of this release before
// the channel, commit 0631f27) know only the legacy hellos "SLFA\x01",
// "SLFV\x01" and "SLFM\x01" (legacy.go), and drop a connection with any
// other hello. So a node speaks the channel only to the members of a
// group whose cluster version is at least controlVersion (every member
// then runs a release that serves it: speaksControl), and the legacy
// framing of the method's row otherwise; the server keeps serving the
// legacy hellos, each a thin adapter onto the same row.
const (
	ctlHello = "SLFC\x01"
	// controlVersion is the cluster version from which a node calls its
	// group's members on the control channel.
	controlVersion uint32 = 3
	// maxUnknownBody bounds the body of a request for a method this node
	// does not know (read and dropped).
	maxUnknownBody = 4 << 10
	// maxErrReply bounds an error reply's body (a coded error).
	maxErrReply = 16 << 10
	// ctlReplyGrace is how long past its deadline a caller waits for the
	// reply: the handler's own timeout answers within it.
	ctlReplyGrace = time.Second
	// ctlWriteTimeout bounds the write of a reply.
	ctlWriteTimeout = 10 * time.Second
)

// errNoAnswer marks a call that reached no node able to answer: none is
// known, its connection failed, or its reply did not decode.
var errNoAnswer = errors.New("no answer")

// errRouteAgain marks a call that did nothing because this node does not
// lead the group (any more), or not ready yet: the caller tries the
// current leader, or again later (status 2).
var errRouteAgain = errors.New("not the leader of the group")

// methodInfo is the untyped part of a method's row.
type methodInfo struct {
	num  uint64 // on the wire: never renumber one
	name string
	// maxReq and maxRep cap the request's and the ok reply's body.
	maxReq, maxRep int
	// limit is the longest a call may last on node n (callTimeout).
	limit func(n *Node) time.Duration
	// legacy is the hello and framing of the method before the channel,
	// or none (legacy.go).
	legacy legacyWire
}

// ctlMethod is a row of the method table.
type ctlMethod interface {
	info() *methodInfo
	// decode reads a request's body from d and returns what serves it.
	decode(d *codec.Decoder) func(context.Context, *Node) ([]byte, error)
}

// handler is a method's request type: its serve method is the method's
// handler, so a row without one does not compile.
type handler[Rep any] interface {
	serve(ctx context.Context, n *Node) (Rep, error)
}

// method is one row of the method table: the request and reply types and
// their codecs.
type method[Req handler[Rep], Rep any] struct {
	methodInfo
	putReq func([]byte, Req) []byte
	getReq func(*codec.Decoder) Req
	putRep func([]byte, Rep) []byte
	getRep func(*codec.Decoder) Rep
}

func (m *methodInfo) info() *methodInfo { return m }

func (m *method[Req, Rep]) decode(d *codec.Decoder) func(context.Context, *Node) ([]byte, error) {
	req := m.getReq(d)
	return func(ctx context.Context, n *Node) ([]byte, error) {
		rep, err := req.serve(ctx, n)
		if err != nil {
			return nil, err
		}
		return m.putRep(nil, rep), nil
	}
}

// methodByNum returns the row of method num, or nil.
func methodByNum(num uint64) ctlMethod {
	for _, m := range ctlMethods {
		if m.info().num == num {
			return m
		}
	}
	return nil
}

// callTimeout is the one deadline rule of a control call, the same on both
// ends: the time the caller asked for (its context's deadline, sent as
// the request's timeout), at most the method's limit on this node; a
// caller that asked for none (0) gets the limit.
func (m *methodInfo) callTimeout(n *Node, asked time.Duration) time.Duration {
	limit := m.limit(n)
	if asked <= 0 || asked > limit {
		return limit
	}
	return asked
}

// statusOf is the one rule that turns a handler's error into a reply's
// status.
func statusOf(err error) byte {
	switch {
	case err == nil:
		return forward.StatusOK
	case errors.Is(err, errRouteAgain), errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return forward.StatusRetry
	}
	return forward.StatusError
}

// speaksControl reports whether every member of this node's group serves
// the control channel.
func (n *Node) speaksControl() bool { return n.fsm.clusterVersion() >= controlVersion }

// call runs method m with req on the node at forward address addr, for
// this node's group, and returns its reply and status: ok, error (err is
// the handler's, decoded), or route again (err says why; errNoAnswer when
// no node answered: a call that could not be sent, or whose connection
// broke, or whose reply did not decode).
func call[Req handler[Rep], Rep any](ctx context.Context, n *Node, addr string, m *method[Req, Rep], req Req) (Rep, byte, error) {
	var rep Rep
	body, status, err := n.callRaw(ctx, addr, &m.methodInfo, m.putReq(nil, req), !n.speaksControl())
	if status != forward.StatusOK {
		return rep, status, err
	}
	d := codec.NewDecoder(body)
	rep = m.getRep(&d)
	if d.Err == nil && len(d.B) != 0 {
		d.Failf("stray bytes after the reply")
	}
	if d.Err != nil {
		return rep, forward.StatusRetry, fmt.Errorf("%w: bad %s reply from %s: %w", errNoAnswer, m.name, addr, d.Err)
	}
	return rep, forward.StatusOK, nil
}

// callRaw is call below the codecs: one call of method m with body, on the
// channel or, with legacy, in the method's legacy framing.
func (n *Node) callRaw(ctx context.Context, addr string, m *methodInfo, body []byte, legacy bool) ([]byte, byte, error) {
	var asked time.Duration
	if d, ok := ctx.Deadline(); ok {
		if asked = time.Until(d); asked <= 0 {
			return nil, forward.StatusRetry, fmt.Errorf("%w: %w", errNoAnswer, context.DeadlineExceeded)
		}
	}
	timeout := m.callTimeout(n, asked)
	nc, err := n.fwd.Dial(addr, min(forward.DialTimeout, timeout))
	if err != nil {
		return nil, forward.StatusRetry, fmt.Errorf("%w: dial %s: %w", errNoAnswer, addr, err)
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	_ = nc.SetDeadline(time.Now().Add(timeout + ctlReplyGrace))
	p := n.fwd.GroupHello()
	if legacy {
		p = m.legacy.appendRequest(p, body, timeout)
	} else {
		p = appendCall(append(p, ctlHello...), 1, m.num, timeout, body)
	}
	if _, err := nc.Write(p); err != nil {
		return nil, forward.StatusRetry, fmt.Errorf("%w: send %s to %s: %w", errNoAnswer, m.name, addr, err)
	}
	br := bufio.NewReader(nc)
	var status byte
	if legacy {
		body, status, err = m.legacy.readReply(br, m)
	} else {
		body, status, err = readReply(br, 1, m)
	}
	if err != nil && status != forward.StatusOK && !errors.Is(err, errBadCtlReply) {
		return nil, status, err // the handler's error
	}
	if err != nil {
		return nil, forward.StatusRetry, fmt.Errorf("%w: %s reply from %s: %w", errNoAnswer, m.name, addr, err)
	}
	return body, status, nil
}

// errBadCtlReply marks a reply that could not be read or decoded.
var errBadCtlReply = errors.New("bad reply")

// appendCall appends a request of the channel.
func appendCall(p []byte, id, num uint64, timeout time.Duration, body []byte) []byte {
	p = binary.AppendUvarint(p, id)
	p = binary.AppendUvarint(p, num)
	p = binary.AppendUvarint(p, uint64(max(timeout.Milliseconds(), 1)))
	return append(p, peer.Frame(body)...)
}

// readReply reads the channel's reply to call id of method m: its body and
// status, or the handler's error (status 1 or 2), or an errBadCtlReply.
func readReply(br *bufio.Reader, id uint64, m *methodInfo) ([]byte, byte, error) {
	got, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, forward.StatusRetry, fmt.Errorf("%w: %w", errBadCtlReply, err)
	}
	status, err := br.ReadByte()
	if err == nil && (got != id || status > forward.StatusRetry) {
		err = fmt.Errorf("reply %d with status %d to call %d", got, status, id)
	}
	if err != nil {
		return nil, forward.StatusRetry, fmt.Errorf("%w: %w", errBadCtlReply, err)
	}
	limit := m.maxRep
	if status != forward.StatusOK {
		limit = maxErrReply
	}
	body, err := peer.ReadFrame(br, limit)
	if err != nil {
		return nil, forward.StatusRetry, fmt.Errorf("%w: %w", errBadCtlReply, err)
	}
	return decodeStatus(status, body)
}

// decodeStatus splits a reply's body by its status: the ok body, or the
// coded error.
func decodeStatus(status byte, body []byte) ([]byte, byte, error) {
	if status == forward.StatusOK {
		return body, status, nil
	}
	d := codec.NewDecoder(body)
	err := d.CodedError(sentinels)
	if d.Err == nil && len(d.B) != 0 {
		d.Failf("stray bytes after the error")
	}
	if d.Err != nil {
		return nil, forward.StatusRetry, fmt.Errorf("%w: %w", errBadCtlReply, d.Err)
	}
	return nil, status, err
}

// appendCtlError appends the body of an error reply: err's code, as the
// group's members know it (errorFor, version.go).
func appendCtlError(p []byte, n *Node, err error) []byte {
	return codec.AppendError(p, errorFor(err, n.fsm.clusterVersion()))
}

// ctlRequest is a request the channel's reader read: the method (nil for
// one this node does not know) and body, or why none could be read.
type ctlRequest struct {
	id, num uint64
	m       ctlMethod
	asked   time.Duration
	body    []byte
	refused error // answered with this error; closes the connection when fatal
	fatal   bool
}

// readRequest reads one request of the channel. A read error ends the
// connection (err); a request that breaks a rule is returned refused.
func readRequest(br *bufio.Reader) (ctlRequest, error) {
	var r ctlRequest
	var ms uint64
	var err error
	if r.id, err = binary.ReadUvarint(br); err == nil {
		if r.num, err = binary.ReadUvarint(br); err == nil {
			ms, err = binary.ReadUvarint(br)
		}
	}
	if err != nil {
		return r, err
	}
	r.asked = time.Duration(min(ms, 1<<40)) * time.Millisecond
	r.m = methodByNum(r.num)
	limit := maxUnknownBody
	if r.m != nil {
		limit = r.m.info().maxReq
	}
	r.body, err = peer.ReadFrame(br, limit)
	switch {
	case errors.Is(err, peer.ErrFrameTooLarge):
		r.refused, r.fatal = &errcode.Error{Code: errcode.Internal, Detail: fmt.Sprintf("control request for method %d refused: %v", r.num, err)}, true
	case err != nil:
		return r, err
	case r.m == nil:
		r.refused = &errcode.Error{Code: errcode.Internal, Detail: fmt.Sprintf("unknown control method %d", r.num)}
	}
	return r, nil
}

// ctlServer serves the control channel's connections (and the legacy
// ones: legacy.go) of a host's groups, which the forward port's server
// hands it (forward.Control).
type ctlServer struct {
	nodes []*Node // by group
	log   *slog.Logger
}

// serve serves a connection of group whose hello, read, is the control
// channel's or a legacy one's; false for any other.
func (s *ctlServer) serve(group int, hello string, c net.Conn, br *bufio.Reader) bool {
	n := s.nodes[group]
	if hello == ctlHello {
		s.serveControl(n, c, br)
		return true
	} else if m := legacyMethod(hello); m != nil {
		s.serveLegacy(n, c, br, m) // legacy.go
		return true
	}
	return false
}

// serveControl serves a connection of the channel (the hellos were read):
// a reader goroutine reads the requests, this one runs them in order and
// writes each reply. The connection's end (the caller hanging up) cancels
// the call running.
func (s *ctlServer) serveControl(n *Node, c net.Conn, br *bufio.Reader) {
	_ = c.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	reqs := make(chan ctlRequest)
	readerDone := make(chan struct{})
	defer func() {
		cancel()
		c.Close()
		<-readerDone
	}()
	go func() {
		defer close(readerDone)
		defer close(reqs)
		for {
			r, err := readRequest(br)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && ctx.Err() == nil {
					s.log.Warn("forward listener: bad control request", "remote", c.RemoteAddr(), "err", err)
				}
				cancel() // a caller that hangs up ends its call
				return
			}
			select {
			case reqs <- r:
			case <-ctx.Done():
				return
			}
			if r.fatal {
				return
			}
		}
	}()
	for r := range reqs {
		status, body, err := byte(forward.StatusError), []byte(nil), r.refused
		if err != nil {
			s.log.Warn("forward listener: control request refused", "remote", c.RemoteAddr(), "err", err)
		} else {
			d := codec.NewDecoder(r.body)
			status, body, err = s.runCall(ctx, n, c, r.m.info(), r.m.decode(&d), &d, r.asked)
		}
		p := binary.AppendUvarint(nil, r.id)
		p = append(p, status)
		if status != forward.StatusOK {
			body = appendCtlError(nil, n, err)
		}
		_ = c.SetWriteDeadline(time.Now().Add(ctlWriteTimeout))
		if _, err := c.Write(append(p, peer.Frame(body)...)); err != nil || r.fatal {
			return
		}
	}
}

// runCall runs one decoded request with the deadline rule and returns its
// reply's status and body, or the error to reply with.
func (s *ctlServer) runCall(ctx context.Context, n *Node, c net.Conn, m *methodInfo, run func(context.Context, *Node) ([]byte, error), d *codec.Decoder, asked time.Duration) (byte, []byte, error) {
	if d.Err == nil && len(d.B) != 0 {
		d.Failf("stray bytes after the request")
	}
	if d.Err != nil {
		s.log.Warn("forward listener: malformed control request", "method", m.name, "remote", c.RemoteAddr(), "err", d.Err)
		return forward.StatusError, nil, d.Err
	}
	cctx, cancel := context.WithTimeout(ctx, m.callTimeout(n, asked))
	defer cancel()
	body, err := run(cctx, n)
	if errors.Is(err, codec.ErrMalformed) {
		s.log.Warn("forward listener: malformed control request", "method", m.name, "remote", c.RemoteAddr(), "err", err)
	}
	return statusOf(err), body, err
}
