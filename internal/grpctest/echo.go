package grpctest

import (
	"errors"
	"io"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Chat sends n messages on a bidirectional echo stream, reading each echo,
// and returns how many came back and the first error.
func Chat(s grpc.BidiStreamingClient[wrapperspb.StringValue, wrapperspb.StringValue], n int) (int, error) {
	for i := range n {
		if err := s.Send(wrapperspb.String(strconv.Itoa(i))); err != nil && !errors.Is(err, io.EOF) {
			return i, err
		}
		if _, err := s.Recv(); err != nil {
			return i, err
		}
	}
	return n, nil
}

// DenialDetails returns the RetryInfo and QuotaFailure details of a
// rate-limit denial, each nil when st does not carry it.
func DenialDetails(st *status.Status) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.QuotaFailure:
			quota = d
		}
	}
	return retry, quota
}
