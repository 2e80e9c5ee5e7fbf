package fuseholder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// ProtocolVersion is the version of the protocol this package speaks (doc.go).
const ProtocolVersion = 1

// Limits of the protocol.
const (
	// MaxMessage is the largest message, in bytes, either side sends or accepts.
	MaxMessage = 64 << 10
	// MaxInit is the largest INIT request a session may carry. The kernel's is a
	// header and a fuse_init_in: about a hundred bytes.
	MaxInit = 16 << 10
	// MaxMountpoint is the longest mountpoint, in bytes (PATH_MAX).
	MaxMountpoint = 4096
	// maxFDs is how many descriptors one message may bring before the receiver
	// reports it: a message carries one at most, extras are closed.
	maxFDs = 4
)

// The operations of a request.
const (
	opHello   = "hello"
	opHold    = "hold"
	opTake    = "take"
	opRelease = "release"
)

// request is what a client sends. A hold request carries the descriptor.
type request struct {
	Version    int    `json:"version"`
	Op         string `json:"op"`
	Init       []byte `json:"init,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
}

// reply is the holder's one answer to a request. A take reply with Held carries
// the descriptor.
type reply struct {
	Version    int    `json:"version"`
	Error      string `json:"error,omitempty"`
	PID        int    `json:"pid,omitempty"`
	Held       bool   `json:"held,omitempty"`
	Init       []byte `json:"init,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
}

// errMalformed marks a message that does not decode; the text after it says why.
var errMalformed = errors.New("malformed fuse holder message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// decodeJSON decodes exactly one JSON object from b into v: nothing may follow it.
// Unknown fields are ignored (a later version may add optional ones).
func decodeJSON(b []byte, v any) error {
	if len(b) == 0 {
		return malformed("empty message")
	}
	if len(b) > MaxMessage {
		return malformed("%d bytes, more than %d", len(b), MaxMessage)
	}
	if b[0] != '{' {
		return malformed("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return malformed("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return malformed("trailing data after the JSON object")
	}
	return nil
}

// decodeRequest decodes and checks one request. A request of a version this
// package does not speak fails with an error saying which one it speaks.
func decodeRequest(b []byte) (request, error) {
	var r request
	if err := decodeJSON(b, &r); err != nil {
		return request{}, err
	}
	if err := checkVersion(r.Version); err != nil {
		return request{}, err
	}
	switch r.Op {
	case opHello, opTake, opRelease:
		if r.Init != nil || r.Mountpoint != "" {
			return request{}, malformed("op %q takes no session", r.Op)
		}
	case opHold:
		if err := checkSession(r.Init, r.Mountpoint); err != nil {
			return request{}, fmt.Errorf("%w: %w", errMalformed, err)
		}
	case "":
		return request{}, malformed("no op")
	default:
		return request{}, malformed("unknown op %q (this holder knows hello, hold, take, release)", r.Op)
	}
	return r, nil
}

// decodeReply decodes and checks one reply. An error reply decodes without error:
// its Error field holds the holder's text.
func decodeReply(b []byte) (reply, error) {
	var r reply
	if err := decodeJSON(b, &r); err != nil {
		return reply{}, err
	}
	if err := checkVersion(r.Version); err != nil {
		if r.Error != "" {
			// An error from a holder that speaks another version is still its answer.
			return reply{}, fmt.Errorf("%w: the holder answered %q", err, r.Error)
		}
		return reply{}, err
	}
	if r.PID < 0 {
		return reply{}, malformed("negative pid %d", r.PID)
	}
	if r.Error != "" {
		if r.Held || r.Init != nil || r.Mountpoint != "" {
			return reply{}, malformed("an error reply carries a session")
		}
		return r, nil
	}
	if r.Held {
		if err := checkSession(r.Init, r.Mountpoint); err != nil {
			return reply{}, fmt.Errorf("%w: %w", errMalformed, err)
		}
	} else if r.Init != nil || r.Mountpoint != "" {
		return reply{}, malformed("a session in a reply that holds none")
	}
	return r, nil
}

func checkVersion(v int) error {
	switch {
	case v == ProtocolVersion:
		return nil
	case v == 0:
		return malformed("no protocol version")
	default:
		return malformed("protocol version %d: this side speaks version %d", v, ProtocolVersion)
	}
}

// checkSession checks the parts of a session a message carries.
func checkSession(init []byte, mountpoint string) error {
	switch {
	case len(init) == 0:
		return errors.New("a session without its INIT request")
	case len(init) > MaxInit:
		return fmt.Errorf("INIT request of %d bytes, more than %d", len(init), MaxInit)
	case mountpoint == "":
		return errors.New("a session without its mountpoint")
	case len(mountpoint) > MaxMountpoint:
		return fmt.Errorf("mountpoint of %d bytes, more than %d", len(mountpoint), MaxMountpoint)
	case !filepath.IsAbs(mountpoint):
		return fmt.Errorf("mountpoint %q is not absolute", mountpoint)
	case strings.IndexByte(mountpoint, 0) >= 0:
		return errors.New("mountpoint contains a NUL byte")
	case !utf8.ValidString(mountpoint):
		// JSON would carry it with its invalid bytes replaced: not byte for byte.
		return fmt.Errorf("mountpoint %q is not valid UTF-8", mountpoint)
	}
	return nil
}

// encode marshals a message and checks its size.
func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode fuse holder message: %w", err)
	}
	if len(b) > MaxMessage {
		return nil, fmt.Errorf("encode fuse holder message: %d bytes, more than %d", len(b), MaxMessage)
	}
	return b, nil
}
