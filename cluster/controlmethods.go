package cluster

import (
	"encoding/binary"
	"time"

	"github.com/sluice-rl/sluice/cluster/codec"
)

// The method table of the control channel (control.go): one row per
// control message. A new message is a row here, its request type with
// its serve method (the handler, beside what it does), and a line in
// docs/design.md's table of methods ("A new control message" lists the
// steps and the tests that fail until each is done).
var ctlMethods = []ctlMethod{announceMethod, versionMethod, memberMethod}

var (
	// announceMethod: a follower tells the leader its addresses, which
	// the leader appends to the log (topology.go).
	announceMethod = &method[announceReq, none]{
		methodInfo: methodInfo{num: 1, name: "announce", maxReq: 4 << 10, maxRep: 0,
			limit:  func(n *Node) time.Duration { return n.cfg.ClusterTimeout + time.Second },
			legacy: legacyWire{hello: "SLFA\x01", reply: replyText}},
		putReq: func(p []byte, r announceReq) []byte {
			p = codec.AppendStr(p, []byte(r.ID))
			p = codec.AppendStr(p, []byte(r.RESP))
			return codec.AppendStr(p, []byte(r.Forward))
		},
		getReq: func(d *codec.Decoder) announceReq {
			return announceReq{codec.Leader{ID: string(d.Str()), RESP: string(d.Str()), Forward: string(d.Str())}}
		},
		putRep: putNone, getRep: getNone,
	}
	// versionMethod: the version poll, both ways: the caller's id and
	// supported cluster version, answered with the callee's (version.go).
	versionMethod = &method[versionReq, uint64]{
		methodInfo: methodInfo{num: 2, name: "version", maxReq: 1 << 10, maxRep: binary.MaxVarintLen64,
			limit:  func(*Node) time.Duration { return time.Second },
			legacy: legacyWire{hello: "SLFV\x01", reply: replyBare}},
		putReq: func(p []byte, r versionReq) []byte {
			return binary.AppendUvarint(codec.AppendStr(p, []byte(r.id)), r.version)
		},
		getReq: func(d *codec.Decoder) versionReq { return versionReq{id: string(d.Str()), version: d.Uvarint()} },
		putRep: binary.AppendUvarint, getRep: (*codec.Decoder).Uvarint,
	}
	// memberMethod: a membership step on a group's leader, or a
	// non-voter's progress (membership.go); the reply is the applied
	// index for a progress step, else 0.
	memberMethod = &method[memberReq, uint64]{
		methodInfo: methodInfo{num: 3, name: "member", maxReq: 4 << 10, maxRep: binary.MaxVarintLen64,
			limit:  func(*Node) time.Duration { return maxMemberTimeout },
			legacy: legacyWire{hello: "SLFM\x01", reply: replyCoded, timeout: true}},
		putReq: func(p []byte, r memberReq) []byte {
			p = append(p, byte(r.op))
			p = codec.AppendStr(p, []byte(r.id))
			return codec.AppendStr(p, []byte(r.raftAddr))
		},
		getReq: func(d *codec.Decoder) memberReq {
			return memberReq{op: memberOp(d.Byte()), id: string(d.Str()), raftAddr: string(d.Str())}
		},
		putRep: binary.AppendUvarint, getRep: (*codec.Decoder).Uvarint,
	}
)

// none is the reply of a method that answers nothing but its status.
type none struct{}

func putNone(p []byte, _ none) []byte { return p }
func getNone(*codec.Decoder) (n none) { return n }

// announceReq is announceMethod's request: the caller's addresses.
type announceReq struct{ codec.Leader }

// versionReq is versionMethod's request.
type versionReq struct {
	id      string // the caller's node id
	version uint64 // the cluster version the caller supports
}

// memberReq is memberMethod's request.
type memberReq struct {
	op           memberOp
	id, raftAddr string // the member the step is about
}
