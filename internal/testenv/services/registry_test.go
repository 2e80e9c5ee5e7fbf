package services

import (
	"context"
	"net/http"
	"testing"

	"github.com/slacker-dev/slacker/internal/testutil"
)

func TestRegistryStartStop(t *testing.T) {
	testutil.RequireTool(t, "docker-registry")
	r, err := StartRegistry(context.Background(), RegistryOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + r.Addr + "/v2/_catalog")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("catalog: %s", resp.Status)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + r.Addr + "/v2/"); err == nil {
		t.Fatal("registry still answers after Stop")
	}
	r.Stop()
}
