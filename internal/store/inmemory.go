package store

import (
	"bytes"
	"sync"
)

// InMemory is the body Get returns for an object it had to read whole before
// handing out its first byte (a compressed object, decoded and verified): its
// bytes are already in memory. ReadAllSized takes them as they are instead of
// copying them into a buffer of its own, which on a start's critical path cost a
// chunk-sized allocation (fresh pages, each a page fault) and a copy per chunk.
type InMemory struct {
	*bytes.Reader
	b []byte
}

// NewInMemory returns a body over b, which its reader may keep: the caller must
// not modify b afterwards.
func NewInMemory(b []byte) *InMemory { return &InMemory{Reader: bytes.NewReader(b), b: b} }

// Bytes returns the whole object, whatever has been read of it.
func (m *InMemory) Bytes() []byte { return m.b }

// Close does nothing: there is nothing left to release.
func (m *InMemory) Close() error { return nil }

// maxPooledBuffer bounds the buffers ReadBuffer keeps for reuse: a chunk's stored
// form is at most a few MiB; larger objects are rare and get buffers of their own.
const maxPooledBuffer = 8 << 20

var buffers sync.Pool // of *[]byte

// ReadBuffer returns a buffer of n bytes for an object's stored form that is
// decoded and then dropped (Get of a compressed object): give it back with
// ReleaseBuffer once nothing refers to it. Reused buffers keep their pages, so
// a node fetching chunk after chunk does not fault in a fresh chunk's worth of
// memory for each.
func ReadBuffer(n int) []byte {
	if n <= maxPooledBuffer {
		if p, ok := buffers.Get().(*[]byte); ok {
			if cap(*p) >= n {
				return (*p)[:n]
			}
			buffers.Put(p)
		}
	}
	return make([]byte, n)
}

// ReleaseBuffer gives b, from ReadBuffer, back for reuse. Nothing may refer to it
// afterwards.
func ReleaseBuffer(b []byte) {
	if cap(b) == 0 || cap(b) > maxPooledBuffer {
		return
	}
	b = b[:cap(b)]
	buffers.Put(&b)
}
