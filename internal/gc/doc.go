// Package gc owns garbage collection and integrity checking of a chunk store shared
// by many nodes, and the records that make collection safe: node leases and the
// collector's state, both kept as store records (store.Refs).
//
// What is live. A snapshot is live if it is named (the local name store, registry
// references given to the collector), listed in the unexpired lease of a node (the
// bases of its volumes, the images named on it), or younger than the grace period;
// a live snapshot keeps its block map and every chunk the map names. A chunk listed
// by an upload in progress (in a lease) is live. No object younger than the grace
// period is ever deleted. Everything else is garbage.
//
// Leases. Each node keeps one record, leases/<node>, listing what it uses and the
// chunks of its uploads in progress, refreshed periodically and valid until its
// Expires time; a lease that has expired is the lease of a dead node and protects
// nothing.
//
// Uploads and the collector's epoch. An upload (a snapshot) lists its chunks in its
// node's lease before it checks which the store already has, so a chunk it will
// reuse cannot be collected under it while the lease lives. A stalled upload may
// outlive its lease, so the collector also keeps a record, gc/state, whose epoch it
// advances when it starts and which says while it runs. Before writing its map an
// upload refreshes its lease and compares the epoch with the one it saw before its
// first existence check (Fence): if a collection ran in between, every chunk is
// checked (and uploaded) again. A map is thus never written naming a chunk a
// collection may have removed.
//
// This package never mounts, fetches for a reader or interprets a volume's
// contents; it reads block maps only to find the chunks they name.
package gc
