//go:build !linux

package peer

import "time"

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist: there
// keepalive and forwarding's own deadlines bound a stuck connection.
func setUserTimeout(uintptr, time.Duration) error { return nil }
