package main

import (
	"bytes"
	"testing"

	pbstruct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
)

// TestRawRequestsAreTheStubsBytes: a request assembled from pre-encoded
// parts is byte for byte what the published stubs marshal for the same
// message, for 1 to 3 descriptors and any values.
func TestRawRequestsAreTheStubsBytes(t *testing.T) {
	vals := []string{"0", "7", "a-much-longer-value-than-the-others", ""}
	for n := 1; n <= 3; n++ {
		enc, err := newRequestEncoder("bench", n, vals)
		if err != nil {
			t.Fatal(err)
		}
		for v := range vals {
			picks := make([]int, n)
			req := &pb.RateLimitRequest{Domain: "bench"}
			for d := range n {
				picks[d] = (v + d) % len(vals)
				req.Descriptors = append(req.Descriptors, &pbstruct.RateLimitDescriptor{Entries: []*pbstruct.RateLimitDescriptor_Entry{{Key: []string{"d0", "d1", "d2"}[d], Value: vals[picks[d]]}}})
			}
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			if got := enc.append(nil, picks); !bytes.Equal(got, want) {
				t.Fatalf("%d descriptors, picks %v: %x, the stubs marshal %x", n, picks, got, want)
			}
		}
	}
}

// TestOverallCode reads the overall code of responses the stubs marshal.
func TestOverallCode(t *testing.T) {
	for _, want := range []pb.RateLimitResponse_Code{pb.RateLimitResponse_UNKNOWN, pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT} {
		b, err := proto.Marshal(&pb.RateLimitResponse{OverallCode: want, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK, LimitRemaining: 9}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := overallCode(b); err != nil || got != want {
			t.Fatalf("overallCode = %v, %v; want %v", got, err, want)
		}
	}
	if _, err := overallCode([]byte{0x08}); err == nil {
		t.Fatal("a truncated response read without error")
	}
}
