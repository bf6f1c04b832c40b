package main

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Peer addresses: without mutual TLS, Raft and forwarding listen only on private addresses.

// checkPeers checks --peers and that, without peer TLS, the Raft and
// forward addresses are private, naming the setting each comes from.
func (c *config) checkPeers(bad func(field, format string, args ...any)) {
	peers, err := parsePeers(c.Peers)
	if err != nil {
		bad("peers", "%v", err)
		return
	}
	if len(peers) > 0 && c.ID == "" {
		bad("id", "required with %s", c.setting("peers"))
	}
	if c.raftTLS() {
		return
	}
	if c.RaftAddr != "" {
		if err := checkPrivate(c.RaftAddr); err != nil {
			bad("raft-addr", "%v", err)
		}
	} else if p, ok := peers[c.ID]; ok {
		if err := checkPrivate(p); err != nil {
			bad("peers", "%s's Raft address: %v", c.ID, err)
		}
	}
	if c.ForwardAddr != "" {
		if err := checkPrivate(c.ForwardAddr); err != nil {
			bad("forward-addr", "%v", err)
		}
	}
}

// checkPrivate refuses a peer listening address that is reachable beyond
// private networks: Raft and forwarding without mutual TLS trust whoever
// connects, so they may only listen on loopback, private (RFC 1918, IPv6
// ULA), shared (RFC 6598, 100.64/10) or link-local addresses. An unspecified
// address (0.0.0.0, ::) binds public interfaces too and is refused; a host
// name is checked by every address it resolves to.
func checkPrivate(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	fix := "listen on a loopback or private address, or secure peer traffic with --raft-tls-cert-file, --raft-tls-key-file and --raft-tls-ca-cert-file"
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else if host == "" {
		ips = []net.IP{net.IPv4zero}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil // the listener will fail with its own error
		}
		for _, a := range addrs {
			ips = append(ips, a.IP)
		}
	}
	for _, ip := range ips {
		if ip.IsUnspecified() {
			return fmt.Errorf("%s binds every interface, public ones included, and Raft and forwarding traffic is neither encrypted nor authenticated: %s", addr, fix)
		}
		if !privateIP(ip) {
			return fmt.Errorf("%s is a public address, and Raft and forwarding traffic is neither encrypted nor authenticated: %s", addr, fix)
		}
	}
	return nil
}

// privateIP reports whether ip is loopback, private, link-local or in RFC
// 6598's shared space 100.64.0.0/10 (carrier-grade NAT, overlay networks).
func privateIP(ip net.IP) bool {
	if ip4 := ip.To4(); ip4 != nil && ip4[0] == 100 && ip4[1]&0xc0 == 64 {
		return true
	}
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast()
}
