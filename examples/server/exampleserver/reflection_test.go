package exampleserver_test

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// reflector is a client that knows nothing of the server's types but what
// server reflection tells it, the way grpcurl works: no .proto, no generated
// code. Its descriptors live in a private registry, never in the process's
// global one (which, in this test binary, holds the server's own types).
type reflector struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[reflectionpb.ServerReflectionRequest, reflectionpb.ServerReflectionResponse]
	protos map[string]*descriptorpb.FileDescriptorProto
}

func newReflector(t *testing.T, cc *grpc.ClientConn) *reflector {
	t.Helper()
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.CloseSend() })
	return &reflector{t: t, stream: stream, protos: map[string]*descriptorpb.FileDescriptorProto{}}
}

func (r *reflector) ask(req *reflectionpb.ServerReflectionRequest) *reflectionpb.ServerReflectionResponse {
	r.t.Helper()
	if err := r.stream.Send(req); err != nil {
		r.t.Fatal(err)
	}
	resp, err := r.stream.Recv()
	if err != nil {
		r.t.Fatal(err)
	}
	if e := resp.GetErrorResponse(); e != nil {
		r.t.Fatalf("reflection %v: %s", req.GetMessageRequest(), e.GetErrorMessage())
	}
	return resp
}

// services lists the services the server offers.
func (r *reflector) services() []string {
	var names []string
	resp := r.ask(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}})
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}

// files returns the registry of every file that defines symbol and the files
// it imports, fetching the imports the server did not send already.
func (r *reflector) files(symbol string) *registry {
	r.t.Helper()
	r.add(r.ask(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
	}))
	for missing := r.missing(); missing != ""; missing = r.missing() {
		r.add(r.ask(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_FileByFilename{FileByFilename: missing},
		}))
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, fd := range r.protos {
		set.File = append(set.File, fd)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		r.t.Fatal(err)
	}
	return &registry{t: r.t, files: files}
}

func (r *reflector) add(resp *reflectionpb.ServerReflectionResponse) {
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, fd); err != nil {
			r.t.Fatal(err)
		}
		r.protos[fd.GetName()] = fd
	}
}

func (r *reflector) missing() string {
	for _, fd := range r.protos {
		for _, dep := range fd.GetDependency() {
			if r.protos[dep] == nil {
				return dep
			}
		}
	}
	return ""
}

// registry finds descriptors in files built from reflection answers.
type registry struct {
	t     *testing.T
	files *protoregistry.Files
}

func (p *registry) find(name string) protoreflect.Descriptor {
	p.t.Helper()
	d, err := p.files.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		p.t.Fatalf("%s: %v", name, err)
	}
	return d
}

// TestReflectionAlone calls the example server as grpcurl does: it finds the
// echo service through server reflection, calls Say with messages built from
// the reflected descriptors until the limiter denies, and decodes the
// denial's RetryInfo and QuotaFailure from descriptors the server sent too.
func TestReflectionAlone(t *testing.T) {
	s := start(t, parse(t, noEnv, "-rate", "2", "-period", "1h"))
	cc := dial(t, s.Addr)
	r := newReflector(t, cc)

	services := r.services()
	for _, want := range []string{"tollgate.example.Echo", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Fatalf("services %q lack %s", services, want)
		}
	}

	echoSvc := r.files("tollgate.example.Echo").find("tollgate.example.Echo").(protoreflect.ServiceDescriptor)
	say := echoSvc.Methods().ByName("Say")
	if say == nil || say.IsStreamingClient() || say.IsStreamingServer() {
		t.Fatalf("Say: %v", say)
	}
	if got := echoSvc.ParentFile().Path(); got != "tollgate/example/echo.proto" {
		t.Fatalf("echo service from file %q", got)
	}
	method := "/" + string(echoSvc.FullName()) + "/" + string(say.Name())
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-tenant", "reflection")

	var denial error
	for i := range 3 {
		in := dynamicpb.NewMessage(say.Input())
		in.Set(say.Input().Fields().ByName("value"), protoreflect.ValueOfString("hello"))
		out := dynamicpb.NewMessage(say.Output())
		err := cc.Invoke(ctx, method, in, out)
		if i < 2 {
			if err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if got := out.Get(say.Output().Fields().ByName("value")).String(); got != "hello" {
				t.Fatalf("call %d answered %q", i, got)
			}
			continue
		}
		denial = err
	}
	st := status.Convert(denial)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("third call: %v, want ResourceExhausted", denial)
	}

	var retryDelay time.Duration
	var subject string
	for _, detail := range st.Proto().GetDetails() {
		name := string(detail.MessageName())
		desc := r.files(name).find(name).(protoreflect.MessageDescriptor)
		m := dynamicpb.NewMessage(desc)
		if err := proto.Unmarshal(detail.GetValue(), m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch name {
		case "google.rpc.RetryInfo":
			d := m.Get(desc.Fields().ByName("retry_delay")).Message()
			fields := d.Descriptor().Fields()
			retryDelay = time.Duration(d.Get(fields.ByName("seconds")).Int())*time.Second +
				time.Duration(d.Get(fields.ByName("nanos")).Int())
		case "google.rpc.QuotaFailure":
			violations := m.Get(desc.Fields().ByName("violations")).List()
			if violations.Len() != 1 {
				t.Fatalf("QuotaFailure with %d violations", violations.Len())
			}
			v := violations.Get(0).Message()
			subject = v.Get(v.Descriptor().Fields().ByName("subject")).String()
		}
	}
	// 2 per hour, both spent: the next unit comes within 30 minutes.
	if retryDelay <= 29*time.Minute || retryDelay > 30*time.Minute {
		t.Fatalf("RetryInfo.retry_delay %v, want just under 30m", retryDelay)
	}
	if subject != "rule:per-tenant" {
		t.Fatalf("QuotaFailure subject %q, want rule:per-tenant", subject)
	}
}
