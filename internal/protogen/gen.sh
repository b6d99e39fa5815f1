#!/bin/sh
# Usage (from `go generate` in the directory of the .proto file):
#   sh ../path/to/internal/protogen/gen.sh REGISTERED_DIR GO_PACKAGE FILE.proto
# Regenerates FILE.pb.go and FILE_grpc.pb.go beside FILE.proto. The file is
# registered as REGISTERED_DIR/FILE.proto, the name server reflection serves
# it under. protoc is Debian's protobuf-compiler (apt-get install -y
# protobuf-compiler); the two Go plugins are built at the pinned versions
# below into a temporary directory, so nothing else on the machine is used
# or changed.
set -eu
dir=$1 pkg=$2 file=$3
PROTOC_GEN_GO=google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC=google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install "$PROTOC_GEN_GO"
GOBIN=$bin go install "$PROTOC_GEN_GO_GRPC"

protoc \
	--plugin=protoc-gen-go="$bin/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$bin/protoc-gen-go-grpc" \
	--proto_path="$dir=." \
	--go_out=. --go_opt=module="$pkg" \
	--go-grpc_out=. --go-grpc_opt=module="$pkg" \
	"$dir/$file"
