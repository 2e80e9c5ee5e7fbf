// Package transport builds the HTTP transport of Slacker's remote stores (S3 and
// the registry store): pooled connections for the node's parallel fetches, and
// each connection's receive buffer sized for a store many milliseconds away.
//
// The receive buffer is the node's side of a fetch's first round trips. Left to
// the kernel, a new connection's receive window starts at 64 KB and grows a
// round trip at a time, so a chunk of a few hundred kilobytes over a 20 ms link
// waits on the node's window for two or three round trips (seen with `ss -ti` on
// the store's side: senders window-limited for 20-50% of their busy time). A
// buffer set before the connection is made opens the window at once. It is set
// only where the kernel allows that much (net.core.rmem_max): a buffer the kernel
// cut down would also stop its autotuning and cap the window below what
// autotuning reaches (ReceiveBufferFor). docs/design.md, "Where a traced start's
// time goes at 20 ms".
package transport
