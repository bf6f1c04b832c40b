package peer

import (
	"log/slog"
	"net"
	"time"
)

// Serve accepts ln's connections and hands each to take, until take
// reports false or Accept fails once closed reports true: the accept loop
// of Raft's listener and of the forward listener. A failed Accept while
// open is logged (what names the listener) and tried again after a pause
// that doubles from 5ms up to 1s and starts over after a success.
func Serve(ln net.Listener, log *slog.Logger, what string, closed func() bool, take func(net.Conn) bool) {
	backoff := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if closed() {
				return
			}
			log.Warn(what+": accept failed", "err", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		if !take(c) {
			return
		}
	}
}
