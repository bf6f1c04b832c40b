package main

import (
	"errors"
	"fmt"

	pbstruct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The raw client (-codec raw, the default) sends the very bytes the
// published stubs would marshal, assembled from parts encoded once, and
// reads only the overall code of a response: the servers see the same
// requests, and the load generator spends less of the machine it shares
// with them (proto marshalling and unmarshalling were an eighth of its CPU).

// rawCodec passes pre-encoded messages through gRPC untouched.
type rawCodec struct{}

// rawMsg is an encoded message.
type rawMsg struct{ b []byte }

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawMsg)
	if !ok {
		return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
	}
	return m.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMsg)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	m.b = append(m.b[:0], data...)
	return nil
}

// Name is the content subtype: the servers decode the bytes as protobuf.
func (rawCodec) Name() string { return "proto" }

// requestEncoder assembles RateLimitRequests of one domain and n
// descriptors of one entry each, key "d<i>" and a value from a list: a
// message's fields are the concatenation of their encodings, so a request is
// its domain's field followed by each descriptor's field, encoded once per
// value.
type requestEncoder struct {
	head []byte     // field 1, the domain
	desc [][][]byte // desc[i][v]: field 2, descriptor i with value v
}

func newRequestEncoder(domain string, n int, values []string) (*requestEncoder, error) {
	head, err := proto.Marshal(&pb.RateLimitRequest{Domain: domain})
	if err != nil {
		return nil, err
	}
	e := &requestEncoder{head: head, desc: make([][][]byte, n)}
	for i := range n {
		e.desc[i] = make([][]byte, len(values))
		for v, val := range values {
			d, err := proto.Marshal(&pbstruct.RateLimitDescriptor{Entries: []*pbstruct.RateLimitDescriptor_Entry{{Key: fmt.Sprintf("d%d", i), Value: val}}})
			if err != nil {
				return nil, err
			}
			f := protowire.AppendTag(nil, 2, protowire.BytesType)
			e.desc[i][v] = protowire.AppendBytes(f, d)
		}
	}
	return e, nil
}

// append appends the request whose descriptor i has the value picks[i].
func (e *requestEncoder) append(dst []byte, picks []int) []byte {
	dst = append(dst, e.head...)
	for i, v := range picks {
		dst = append(dst, e.desc[i][v]...)
	}
	return dst
}

// overallCode reads a RateLimitResponse's overall_code (field 1; absent
// means UNKNOWN) from its encoding.
func overallCode(b []byte) (pb.RateLimitResponse_Code, error) {
	code := pb.RateLimitResponse_UNKNOWN
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, errors.New("response: bad tag")
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return 0, errors.New("response: bad overall_code")
			}
			code, b = pb.RateLimitResponse_Code(v), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, errors.New("response: bad field")
		}
		b = b[n:]
	}
	return code, nil
}
