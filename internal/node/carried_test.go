package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/blockmap"
	"github.com/slacker-dev/slacker/internal/errdefs"
)

// TestCarryMap: a map carried by a pull is taken without a lookup in the store,
// after it is checked against its ID; a carried map whose snapshot the store does
// not have is forgotten once the background check finds so, and the snapshot is
// then "not in the store", as a lookup would have said.
func TestCarryMap(t *testing.T) {
	requirePrivileged(t)
	ctx := context.Background()
	n, st := newNode(t)

	stored, err := blockmap.Encode(blockmap.Empty(1 << 30))
	if err != nil {
		t.Fatal(err)
	}
	id := blockmap.ID(stored)
	if err := st.Put(ctx, id, int64(len(stored)), bytes.NewReader(stored)); err != nil {
		t.Fatal(err)
	}
	if err := n.CarryMap(ctx, id, append([]byte(nil), stored[:len(stored)-1]...)); !errors.Is(err, errdefs.ErrCorrupt) {
		t.Fatalf("a carried map that is not the snapshot's: %v", err)
	}
	if err := n.CarryMap(ctx, "sha256:nope", stored); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("a carried map under a bad ID: %v", err)
	}
	if err := n.CarryMap(ctx, id, stored); err != nil {
		t.Fatal(err)
	}
	if m, err := n.Map(ctx, id); err != nil || m.Size != 1<<30 {
		t.Fatalf("Map of a carried map: %v, %v", m, err)
	}
	if b, err := n.EncodedMap(ctx, id); err != nil || !bytes.Equal(b, stored) {
		t.Fatalf("EncodedMap: %d bytes, %v", len(b), err)
	}

	// Not in the store: taken, then forgotten.
	absent, err := blockmap.Encode(blockmap.Empty(2 << 30))
	if err != nil {
		t.Fatal(err)
	}
	gone := blockmap.ID(absent)
	if err := n.CarryMap(ctx, gone, absent); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := n.Map(ctx, gone)
		if errors.Is(err, errdefs.ErrNotFound) && strings.Contains(err.Error(), "not in the store") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a carried map whose snapshot the store lacks is still used: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(n.cfg.Root, "maps", gone.Encoded())); !os.IsNotExist(err) {
		t.Fatalf("the forgotten map's file: %v", err)
	}
	// The stored one stays.
	if _, err := n.Map(ctx, id); err != nil {
		t.Fatal(err)
	}
}
