// Package freeport picks TCP ports of 127.0.0.1 for the servers that tests
// and tools start: below the kernel's ephemeral port range, so that no
// outgoing connection takes one as its source port between the moment it
// is picked and the moment its server binds it. With ports from the
// ephemeral range (what listening on port 0 gives), a node dialling a peer
// that has not started yet, or that was killed and is starting again, can
// take the peer's port, which then fails with "address already in use".
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

const (
	// lowest is the lowest port handed out: well above the ports of
	// common services.
	lowest = 10000
	// defaultEphemeral is where Linux's ephemeral range starts by default,
	// used when the kernel's setting cannot be read.
	defaultEphemeral = 32768
	// attempts bounds the random ports tried before giving up.
	attempts = 200
)

// rangeFile is Linux's setting of the ephemeral port range.
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Listen listens on a free port of 127.0.0.1 below the ephemeral range. The
// caller keeps the listener open for as long as the port must stay free,
// and closes it just before its server binds the port.
func Listen() (net.Listener, error) {
	return listenBelow(ephemeralStart(rangeFile))
}

// Ports returns n distinct ports of 127.0.0.1 below the ephemeral range
// that were free when it returned.
func Ports(n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := Listen()
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listenBelow listens on a random free port in [lowest, end); when that
// range is too small to pick from, on any free port.
func listenBelow(end int) (net.Listener, error) {
	if end-lowest < 1000 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("freeport: %w", err)
		}
		return ln, nil
	}
	var last error
	for range attempts {
		port := lowest + rand.IntN(end-lowest)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			return ln, nil
		}
		last = err
	}
	return nil, fmt.Errorf("freeport: no free port below %d after %d attempts: %w", end, attempts, last)
}

// ephemeralStart returns the first port of the ephemeral range as the file
// at path (Linux's ip_local_port_range: "first last") gives it, or the
// Linux default when it cannot be read.
func ephemeralStart(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return defaultEphemeral
	}
	first, err := parseRangeStart(string(b))
	if err != nil {
		return defaultEphemeral
	}
	return first
}

// parseRangeStart parses the first number of "first last".
func parseRangeStart(s string) (int, error) {
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return 0, errors.New("want two numbers")
	}
	first, err := strconv.Atoi(fields[0])
	if err != nil || first < 1 || first > 65535 {
		return 0, fmt.Errorf("bad first port %q", fields[0])
	}
	return first, nil
}
