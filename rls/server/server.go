// Package server serves sluice's Envoy rate limit service over its two
// front ends, as envoyproxy/ratelimit does: gRPC
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (the published
// stubs, grpc-go's own server) and HTTP POST /json (the request's protobuf
// JSON; 200 for OK, 429 for OVER_LIMIT, 400 for a bad request, the
// response's JSON as the body). Both decide through one rls.Service and the
// node's executor, so every node of a cluster serves them.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pbstruct "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/errcode"
	"github.com/sluice-rl/sluice/rls"
	"github.com/sluice-rl/sluice/rls/rules"
)

// Config configures both front ends.
type Config struct {
	Service *rls.Service
	Exec    rls.Executor
	// TLS, when not nil, serves both front ends over TLS (with client
	// certificates when it requires them).
	TLS *tls.Config
	// Timeout bounds one decision (0: 5 s; negative: none, for an executor
	// that never waits, as the in-memory one). A caller's deadline that
	// ends sooner is kept as it is.
	Timeout time.Duration
	// Ready, when set, says whether the node can decide (nil) or why not:
	// GET /healthcheck answers 200 "OK" or 500 with the reason.
	Ready func() error
	Log   *slog.Logger
}

// MaxBodyBytes bounds a POST /json body.
const MaxBodyBytes = 1 << 20

// StreamWorkers is the gRPC server's pool of call goroutines.
const StreamWorkers = 128

// MaxDescriptors bounds the descriptors of one request.
const MaxDescriptors = 1024

type handler struct {
	pb.UnimplementedRateLimitServiceServer
	cfg Config
}

// GRPC is the gRPC front end.
type GRPC struct {
	srv *grpc.Server
	ln  net.Listener
}

// ListenGRPC listens on addr and serves ShouldRateLimit.
func ListenGRPC(addr string, cfg Config) (*GRPC, error) {
	cfg = withDefaults(cfg)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --rls-addr %s: %w", addr, err)
	}
	// Stream workers: a pool of goroutines whose stacks have grown to what
	// a call needs, instead of a new goroutine per call that grows its
	// stack every time (a tenth of the server's CPU when profiled). A call
	// finding every worker busy gets a goroutine of its own, as without.
	// A shared write buffer: a connection's buffer is taken from a pool
	// for each flush rather than held (and filled) per connection.
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxBodyBytes), grpc.NumStreamWorkers(StreamWorkers), grpc.SharedWriteBuffer(true)}
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	g := &GRPC{srv: grpc.NewServer(opts...), ln: ln}
	pb.RegisterRateLimitServiceServer(g.srv, &handler{cfg: cfg})
	// gRPC's health service, as envoyproxy/ratelimit serves it, for
	// Kubernetes' gRPC probes and Envoy's health checks: SERVING while the
	// server runs (whether a decision can be made is /readyz's question).
	hs := health.NewServer()
	hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g.srv, hs)
	go func() {
		if err := g.srv.Serve(ln); err != nil {
			cfg.Log.Error("rls gRPC server stopped", "err", err)
		}
	}()
	return g, nil
}

// Addr returns the listening address.
func (g *GRPC) Addr() string { return g.ln.Addr().String() }

// Close stops the server, letting calls in flight finish until ctx ends.
func (g *GRPC) Close(ctx context.Context) {
	done := make(chan struct{})
	go func() { g.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		g.srv.Stop()
	}
}

func withDefaults(cfg Config) Config {
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return cfg
}

// ShouldRateLimit implements the RateLimitService.
func (h *handler) ShouldRateLimit(ctx context.Context, in *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	out, err := h.decide(ctx, in)
	if err != nil {
		return nil, grpcError(err)
	}
	return out, nil
}

func (h *handler) decide(ctx context.Context, in *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	var req rls.Request // on the stack: the service keeps no reference to it
	if err := fromProto(in, &req); err != nil {
		return nil, err
	}
	// The decision's own bound, unless the caller's (Envoy sends its
	// filter's timeout as grpc-timeout) ends sooner, or the executor never
	// waits (Timeout < 0: the in-memory one). A timer per call is a cost
	// measured in the profile of a busy server.
	if t := h.cfg.Timeout; t > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > t {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, t)
			defer cancel()
		}
	}
	res, err := h.cfg.Service.Decide(ctx, h.cfg.Exec, &req)
	if err != nil {
		return nil, err
	}
	return ToProto(res), nil
}

// fromProto fills req from Envoy's request (req may live on the caller's
// stack: the service keeps no reference to it).
func fromProto(in *pb.RateLimitRequest, req *rls.Request) error {
	if len(in.GetDescriptors()) > MaxDescriptors {
		return &rls.BadRequestError{Reason: fmt.Sprintf("%d descriptors: at most %d", len(in.GetDescriptors()), MaxDescriptors)}
	}
	*req = rls.Request{Domain: in.GetDomain(), Hits: in.GetHitsAddend(), Descriptors: make([]rls.Descriptor, len(in.GetDescriptors()))}
	n := 0
	for _, d := range in.GetDescriptors() {
		n += len(d.GetEntries())
	}
	all := make([]rules.Entry, n) // every descriptor's entries, in one allocation
	for i, d := range in.GetDescriptors() {
		out := &req.Descriptors[i]
		out.Entries, all = all[:len(d.GetEntries()):len(d.GetEntries())], all[len(d.GetEntries()):]
		for j, e := range d.GetEntries() {
			out.Entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		if h := d.GetHitsAddend(); h != nil {
			out.HasHits, out.Hits = true, h.GetValue()
		}
		out.Negative = d.GetIsNegativeHits()
		if l := d.GetLimit(); l != nil {
			out.Override = &rls.Override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: overrideUnit(l)}
		}
	}
	return nil
}

// overrideUnit maps the override's unit (envoy.type.v3.RateLimitUnit,
// whose numbers match the response's units for second..year; it has no
// week) to a rules.Unit.
func overrideUnit(l *pbstruct.RateLimitDescriptor_RateLimitOverride) rules.Unit {
	u := rules.Unit(l.GetUnit())
	if u < rules.UnitSecond || u > rules.UnitYear {
		return rules.UnitUnknown
	}
	return u
}

// statusBox holds one descriptor's status and the two messages it points to.
type statusBox struct {
	status pb.RateLimitResponse_DescriptorStatus
	limit  pb.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// ToProto converts a response to Envoy's.
func ToProto(r *rls.Response) *pb.RateLimitResponse {
	out := &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_Code(r.Overall),
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, len(r.Statuses)),
	}
	// One allocation for every status's three messages, instead of three
	// per status (the messages are built in place and never copied).
	boxes := make([]statusBox, len(r.Statuses))
	for i := range r.Statuses {
		s, b := &r.Statuses[i], &boxes[i]
		st := &b.status
		st.Code, st.LimitRemaining = pb.RateLimitResponse_Code(s.Code), s.Remaining
		if s.Limit != nil {
			b.limit.Name = s.Limit.Name
			b.limit.RequestsPerUnit = s.Limit.RequestsPerUnit
			b.limit.Unit = pb.RateLimitResponse_RateLimit_Unit(s.Limit.Unit)
			b.reset.Seconds = s.ResetSeconds
			st.CurrentLimit, st.DurationUntilReset = &b.limit, &b.reset
		}
		out.Statuses[i] = st
	}
	for _, h := range r.Headers {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &core.HeaderValue{Key: h.Key, Value: h.Value})
	}
	return out
}

// grpcError maps a decision's error to a gRPC status: a bad request is
// InvalidArgument; a refusal that passes (not applied: no leader yet, a
// node loading, stopping, removed, halted or unable to write its log, a
// cluster version still being raised) Unavailable, which gRPC clients
// retry (Envoy's failure_mode_deny decides what then happens); one that
// may have applied it Unknown; a key of another kind FailedPrecondition;
// the memory and key limits ResourceExhausted.
func grpcError(err error) error {
	var bad *rls.BadRequestError
	if errors.As(err, &bad) {
		return status.Error(codes.InvalidArgument, bad.Reason)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err).Err()
	}
	e := errcode.Of(err)
	if e == nil {
		return status.Error(codes.Internal, err.Error())
	}
	c := codes.Internal
	switch {
	case e.Code.Class() == errcode.MayHaveApplied:
		c = codes.Unknown
	case e.Code.Class() == errcode.Unavailable, e.Code == errcode.ClusterVersion, e.Code == errcode.ApplyHalted,
		e.Code == errcode.LogWriteFailed, e.Code == errcode.Removed:
		c = codes.Unavailable
	case e.Code == errcode.WrongType:
		c = codes.FailedPrecondition
	case e.Code == errcode.OOM, e.Code == errcode.KeyLimit:
		c = codes.ResourceExhausted
	case e.Code == errcode.BadRule:
		c = codes.InvalidArgument
	}
	return status.Error(c, err.Error())
}

// HTTP is the POST /json front end.
type HTTP struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// ListenHTTP listens on addr and serves POST /json.
func ListenHTTP(addr string, cfg Config) (*HTTP, error) {
	cfg = withDefaults(cfg)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --rls-http-addr %s: %w", addr, err)
	}
	h := &handler{cfg: cfg}
	mux := http.NewServeMux()
	mux.HandleFunc("/json", h.serveJSON)
	// envoyproxy/ratelimit's health check, which Kubernetes probes of its
	// deployments name.
	mux.HandleFunc("/healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if cfg.Ready != nil {
			if err := cfg.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte("OK"))
	})
	s := &HTTP{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
			ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug), TLSConfig: cfg.TLS},
		ln: ln, done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		var err error
		if cfg.TLS != nil {
			err = s.srv.ServeTLS(ln, "", "")
		} else {
			err = s.srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Log.Error("rls HTTP server stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr returns the listening address.
func (s *HTTP) Addr() string { return s.ln.Addr().String() }

// Close stops the server, letting requests in flight finish until ctx ends.
func (s *HTTP) Close(ctx context.Context) {
	_ = s.srv.Shutdown(ctx)
	<-s.done
}

// serveJSON is envoyproxy/ratelimit's /json endpoint.
func (h *handler) serveJSON(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var in pb.RateLimitRequest
	if err := protojson.Unmarshal(body, &in); err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	out, err := h.decide(r.Context(), &in)
	if err != nil {
		st := status.Convert(grpcError(err))
		code := http.StatusInternalServerError
		switch st.Code() {
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.Unavailable:
			code = http.StatusServiceUnavailable
		}
		http.Error(w, st.Message(), code)
		return
	}
	b, err := protojson.Marshal(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if out.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	_, _ = w.Write(b)
}
