// Package faultstore wraps a store.Store and injects faults into its calls, for
// tests of everything above the store (fetch, cache, node, gc): errors, hangs,
// latency, transfers cut in the middle and corrupted bytes, chosen per operation
// and per object, switched on and off while the store is in use. It is the
// contract-level counterpart of package faultproxy (which injects faults into the
// network between a node and a real store), in the style of pebble's errorfs.
//
// A faultstore never changes what the inner store holds: a fault is only ever a
// different answer to one call. It must never be used outside tests.
package faultstore
