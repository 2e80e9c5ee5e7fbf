package node

import (
	"os"
	"path/filepath"
	"testing"
)

// TestNodeIDIsStable: the node's ID is made once, kept in <root>/node-id, and read
// back by the next start; making it leaves no other file in the root.
func TestNodeIDIsStable(t *testing.T) {
	root := t.TempDir()
	id, err := nodeID(root)
	if err != nil || len(id) != 16 {
		t.Fatalf("nodeID: %q, %v", id, err)
	}
	again, err := nodeID(root)
	if err != nil || again != id {
		t.Fatalf("second nodeID: %q, %v; want %q", again, err, id)
	}
	if b, err := os.ReadFile(filepath.Join(root, "node-id")); err != nil || string(b) != id+"\n" {
		t.Errorf("node-id holds %q, %v", b, err)
	}
	ents, err := os.ReadDir(root)
	if err != nil || len(ents) != 1 {
		t.Errorf("root holds %v, %v; want only node-id", ents, err)
	}
}
