package cli

import (
	"fmt"
	"testing"

	"github.com/slacker-dev/slacker/internal/errdefs"
)

// TestExit checks the CLI's translation of a command's error: run's own codes pass
// through, every other error exits 1 with its message on one "slacker:" line.
func TestExit(t *testing.T) {
	notFound := errdefs.Errorf(errdefs.ErrNotFound, "no such container: %s", "ghost")
	for _, tc := range []struct {
		name string
		err  error
		code int
		line string
	}{
		{"success", nil, 0, ""},
		{"not found", notFound, 1, "slacker: no such container: ghost"},
		{"run's own failure", &exitError{125, notFound}, 125, "slacker: no such container: ghost"},
		{"the container's code", &exitError{code: 3}, 3, ""},
		{"wrapped exit code", fmt.Errorf("run: %w", &exitError{126, fmt.Errorf("permission denied")}), 126, "slacker: permission denied"},
	} {
		code, line := Exit(tc.err)
		if code != tc.code || line != tc.line {
			t.Errorf("%s: Exit = %d, %q; want %d, %q", tc.name, code, line, tc.code, tc.line)
		}
	}
}
