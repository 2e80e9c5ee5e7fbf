package rig

import (
	"regexp"
	"testing"
)

// In a test binary built inside the checkout, the commit is a short hex hash,
// possibly dirty.
func TestCommitInCheckout(t *testing.T) {
	if c := Commit(); !regexp.MustCompile(`^[0-9a-f]{7}(-dirty)?$`).MatchString(c) {
		t.Fatalf("Commit() = %q, want a short hash", c)
	}
}
