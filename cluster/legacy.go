package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
	"github.com/sluice-rl/sluice/cluster/forward"
	"github.com/sluice-rl/sluice/cluster/peer"
)

// The legacy hellos: how the control methods travelled before the control
// channel (control.go), and still do to and from nodes of older releases
// during a rolling upgrade. Each is one call per connection: the hello,
// one request frame, one reply frame, in one of three reply shapes:
//
//	"SLFA\x01" announce (v0.1.0)  request = frame(body)
//	                              reply   = frame(status byte | text)
//	"SLFV\x01" version (v0.2.0)   request = frame(body)
//	                              reply   = frame(body), or none on an error
//	"SLFM\x01" member (v0.2.0)    request = frame(body | uvarint timeout (ms))
//	                              reply   = frame(status byte | body or coded error)
//
// The bodies are the channel's (controlmethods.go). A node serves these
// hellos as thin adapters onto the method's row (serveLegacy: the same
// handler, deadline rule and statuses), and calls them, through the same
// call as the channel, while its group's cluster version is below
// controlVersion. docs/design.md ("The control channel") says when this
// file goes.

// legacyReply is the shape of a legacy reply.
type legacyReply byte

const (
	noLegacy   legacyReply = iota // a method that came with the channel
	replyText                     // status byte | text
	replyBare                     // the body, nothing on an error
	replyCoded                    // status byte | body or coded error
)

// legacyWire is how a method travelled before the channel.
type legacyWire struct {
	hello string
	reply legacyReply
	// timeout: the request's body ends with the call's timeout.
	timeout bool
}

// legacyMethod returns the row whose legacy hello is hello, or nil.
func legacyMethod(hello string) ctlMethod {
	for _, m := range ctlMethods {
		if w := m.info().legacy; w.reply != noLegacy && w.hello == hello {
			return m
		}
	}
	return nil
}

// appendRequest appends a legacy call: the hello and the request frame
// (body is the caller's to change).
func (w legacyWire) appendRequest(p, body []byte, timeout time.Duration) []byte {
	if w.timeout {
		body = binary.AppendUvarint(body, uint64(max(timeout.Milliseconds(), 1)))
	}
	return append(append(p, w.hello...), peer.Frame(body)...)
}

// readReply reads a legacy reply to a call of m: its body and status, or
// the handler's error, or an errBadCtlReply.
func (w legacyWire) readReply(br *bufio.Reader, m *methodInfo) ([]byte, byte, error) {
	p, err := peer.ReadFrame(br, 1+max(m.maxRep, maxErrReply))
	if err == nil && w.reply != replyBare && (len(p) == 0 || p[0] > forward.StatusRetry) {
		err = fmt.Errorf("reply %q", p)
	}
	if err != nil {
		return nil, forward.StatusRetry, fmt.Errorf("%w: %w", errBadCtlReply, err)
	}
	switch w.reply {
	case replyBare:
		return p, forward.StatusOK, nil
	case replyText:
		if p[0] == forward.StatusOK {
			return nil, forward.StatusOK, nil
		}
		return nil, p[0], errors.New(string(p[1:]))
	}
	return decodeStatus(p[0], p[1:])
}

// appendReply appends a legacy reply's payload; false: none is sent (the
// connection is closed).
func (w legacyWire) appendReply(p []byte, n *Node, status byte, body []byte, err error) ([]byte, bool) {
	switch w.reply {
	case replyBare:
		return append(p, body...), status == forward.StatusOK
	case replyText:
		p = append(p, status)
		if err != nil {
			p = append(p, err.Error()...)
		}
		return p, true
	}
	p = append(p, status)
	if status == forward.StatusOK {
		return append(p, body...), true
	}
	return appendCtlError(p, n, err), true
}

// serveLegacy serves one legacy call of m (the hellos were read).
func (s *ctlServer) serveLegacy(n *Node, c net.Conn, br *bufio.Reader, m ctlMethod) {
	info := m.info()
	w := info.legacy
	limit := info.maxReq
	if w.timeout {
		limit += binary.MaxVarintLen64
	}
	p, err := peer.ReadFrame(br, limit)
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.log.Warn("forward listener: bad control request", "method", info.name, "remote", c.RemoteAddr(), "err", err)
		}
		return
	}
	d := codec.NewDecoder(p)
	run := m.decode(&d)
	var asked time.Duration
	if w.timeout {
		asked = time.Duration(min(d.Uvarint(), 1<<40)) * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The caller hanging up (its deadline, a new leader) ends the call.
	_ = c.SetReadDeadline(time.Time{})
	go func() {
		_, _ = br.ReadByte()
		cancel()
	}()
	status, body, err := s.runCall(ctx, n, c, info, run, &d, asked)
	if reply, ok := w.appendReply(nil, n, status, body, err); ok {
		_ = c.SetWriteDeadline(time.Now().Add(ctlWriteTimeout))
		_, _ = c.Write(peer.Frame(reply))
	}
}
