package services

import (
	"context"
	"net/http"
	"syscall"
	"testing"

	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestMinIOStartStop builds MinIO if it is not cached yet (scripts/test.sh runs it
// first, alone, so the build does not count against another test's time), starts
// it, and stops it by PID.
func TestMinIOStartStop(t *testing.T) {
	testutil.RequireTool(t, "go")
	m, err := StartMinIO(context.Background(), MinIOOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop() })
	resp, err := http.Get("http://" + m.Addr + "/minio/health/live")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("health: %s", resp.Status)
	}
	// Anonymous requests are refused: the server has credentials.
	resp, err = http.Get("http://" + m.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("anonymous list of buckets: %s, want 403", resp.Status)
	}
	pid := m.PID()
	if pid <= 0 {
		t.Fatalf("pid %d", pid)
	}
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + m.Addr + "/minio/health/live"); err == nil {
		t.Fatal("minio still answers after Stop")
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Fatalf("minio process %d still exists after Stop (kill 0: %v)", pid, err)
	}
	m.Stop()
}
