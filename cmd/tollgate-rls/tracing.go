package main

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// tracingSettings are envoyproxy/ratelimit's TRACING_* variables: OTLP
// traces to where the exporter's own OTEL_EXPORTER_OTLP_* variables say.
type tracingSettings struct {
	enabled                      bool
	service, namespace, instance string
	protocol                     string // http or grpc
	sampling                     float64
}

func tracingOf(env envSettings) tracingSettings {
	return tracingSettings{
		enabled: env.TracingEnabled, service: env.TracingService, namespace: env.TracingNamespace, instance: env.TracingInstanceID,
		protocol: strings.ToLower(env.TracingProtocol), sampling: env.TracingSampling,
	}
}

// provider returns the tracer provider of t and its shutdown, or nil when
// tracing is off.
func (t tracingSettings) provider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	if !t.enabled {
		return nil, nil
	}
	var client otlptrace.Client
	switch t.protocol {
	case "http", "":
		client = otlptracehttp.NewClient()
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		return nil, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%s: want http or grpc", t.protocol)
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceName(t.service))}
	if t.namespace != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceNamespace(t.namespace)))
	}
	if t.instance != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceInstanceID(t.instance)))
	}
	res, err := resource.New(ctx, attrs...)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.sampling))),
	), nil
}
