package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// systemd's readiness protocol (sd_notify(3)), for a unit with Type=notify:
// one datagram per state change to the unix socket named by NOTIFY_SOCKET.
// docs/operations.md, "systemd", says when sluice sends what.

// notifier sends sd_notify states; the zero value (no NOTIFY_SOCKET) sends
// nothing.
type notifier struct {
	socket string // NOTIFY_SOCKET: a path, or @name for the abstract namespace
}

// notify sends one datagram of state lines ("READY=1", "STOPPING=1",
// "STATUS=..."); without a socket it does nothing.
func (n notifier) notify(state string) error {
	if n.socket == "" {
		return nil
	}
	name := n.socket
	if name[0] == '@' {
		name = "\x00" + name[1:] // Linux's abstract socket namespace
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %q: %w", n.socket, err)
	}
	return nil
}

// readyWaiter is an executor that can say when it serves commands: a
// cluster host (every group has a ready leader, this node has replayed its
// log and caught up). An executor without it serves from the start.
type readyWaiter interface {
	Ready() error
}

// waitServing polls exec's readiness every interval until it serves (nil)
// or ctx ends (ctx.Err()). Each time the reason for not serving changes,
// status is called with it (for STATUS=).
func waitServing(ctx context.Context, exec any, interval time.Duration, status func(string)) error {
	rw, ok := exec.(readyWaiter)
	if !ok {
		return nil
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	last := ""
	for {
		err := rw.Ready()
		if err == nil {
			return nil
		}
		if msg := err.Error(); msg != last {
			last = msg
			status(msg)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		}
	}
}
