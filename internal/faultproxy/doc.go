// Package faultproxy is a TCP proxy that puts a misbehaving network between a
// client (a node) and a real server (a registry, an S3 server): latency, a
// bandwidth cap shared by every connection like a link's, connections reset in the
// middle of a transfer, a link that hangs (open, moving nothing), a server that is
// gone (every connection reset), and, in HTTP mode, answers the server never gave:
// 5xx statuses and 401s from an emulated token service whose tokens expire. Every
// fault can be switched on and off while connections are open, so a test (or the
// benchmark) can take a store away mid-run and give it back.
//
// Tests and benchmarks use it; it must never sit in a production path. It moves
// bytes without reading them except in HTTP mode, where it parses requests only to
// decide which to fail, and forwards the rest to the server unchanged.
package faultproxy
