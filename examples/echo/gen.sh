#!/bin/sh
# Regenerates echo.pb.go and echo_grpc.pb.go from echo.proto (run by
# `go generate` in this directory). protoc is Debian's protobuf-compiler
# (apt-get install -y protobuf-compiler); the two Go plugins are built at the
# pinned versions below into a temporary directory, so nothing else on the
# machine is used or changed.
set -eu
PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install "$PROTOC_GEN_GO"
GOBIN=$bin go install "$PROTOC_GEN_GO_GRPC"

# The file is registered as tollgate/example/echo.proto (its package's path),
# the name server reflection serves it under.
protoc \
	--plugin=protoc-gen-go="$bin/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
	--proto_path=tollgate/example=. \
	--go_out=. --go_opt=module=github.com/tollgate/tollgate/examples/echo \
	--go-grpc_out=. --go-grpc_opt=module=github.com/tollgate/tollgate/examples/echo \
	tollgate/example/echo.proto
