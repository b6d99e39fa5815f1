// Package adminv1 is the generated Go code of tollgate.admin.v1, the admin
// service of a tollgate Limiter (admin.proto). Package admin implements it.
package adminv1

//go:generate sh ../../internal/protogen/gen.sh tollgate/admin/v1 github.com/tollgate/tollgate/admin/v1 admin.proto
