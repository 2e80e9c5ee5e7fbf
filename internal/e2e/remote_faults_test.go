package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/faultproxy"
	"github.com/slacker-dev/slacker/internal/gc"
	slnode "github.com/slacker-dev/slacker/internal/node"
	"github.com/slacker-dev/slacker/internal/store"
	"github.com/slacker-dev/slacker/internal/store/storeurl"
	"github.com/slacker-dev/slacker/internal/testenv"
	"github.com/slacker-dev/slacker/internal/testenv/services"
	"github.com/slacker-dev/slacker/internal/testutil"
)

// TestRemoteStoreFaults puts the fault proxy between a node and a real S3 server
// (MinIO) and a real registry (the registry backend, with token auth), and breaks
// the link in each way a network can break while a volume is mounted: a slow link,
// transient 5xx, an expired token, connections cut mid-transfer, a server that is
// gone, one that hangs, one that answers 503 for good. Reads through transient
// trouble return the right bytes; reads through lasting trouble fail with EIO
// within the bound and a log line, while data already read keeps working and
// fsynced writes keep landing; healed, the same reads return the right bytes
// without restarting anything; the filesystem is clean at the end.
func TestRemoteStoreFaults(t *testing.T) {
	testutil.RequireTool(t, "docker-registry")
	ctx := context.Background()
	backends := []struct {
		name  string
		start func(t *testing.T, work string) (target string, location func(addr string) string)
		auth  bool
	}{
		{"s3", func(t *testing.T, work string) (string, func(string) string) {
			m, err := services.StartMinIO(ctx, services.MinIOOptions{Dir: filepath.Join(work, "minio")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Stop() })
			return m.Addr, func(addr string) string {
				return fmt.Sprintf("s3://%s:%s@%s/faults?insecure=1&create=1", m.AccessKey, m.SecretKey, addr)
			}
		}, false},
		{"registry", func(t *testing.T, work string) (string, func(string) string) {
			r, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Stop() })
			return r.Addr, func(addr string) string { return "registry://" + addr + "/slacker/chunks" }
		}, true},
	}
	type fault struct {
		name   string
		set    func(p *faultproxy.Proxy)
		lasts  bool // reads fail with EIO until healed
		onAuth bool // only with token auth
	}
	faults := []fault{
		{name: "50ms RTT at 1 Gbit/s", set: func(p *faultproxy.Proxy) { p.SetLatency(50 * time.Millisecond); p.SetBandwidth(125_000_000) }},
		{name: "three 503s", set: func(p *faultproxy.Proxy) { p.FailRequests(503, 3, nil) }},
		{name: "token expired", set: func(p *faultproxy.Proxy) { p.ExpireTokens() }, onAuth: true},
		{name: "transfers cut", set: func(p *faultproxy.Proxy) { p.ResetAfter(100 << 10) }, lasts: true},
		{name: "server gone", set: func(p *faultproxy.Proxy) { p.SetDown(true) }, lasts: true},
		{name: "server hangs", set: func(p *faultproxy.Proxy) { p.SetHang(true) }, lasts: true},
		{name: "503 for good", set: func(p *faultproxy.Proxy) { p.FailRequests(503, -1, nil) }, lasts: true},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			work := t.TempDir()
			target, location := be.start(t, work)
			p, err := faultproxy.Start(faultproxy.Options{Target: target, HTTP: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Close() })
			heal := func() {
				p.Heal()
				if be.auth {
					p.RequireTokens(&faultproxy.TokenAuth{TTL: time.Hour})
				}
			}
			heal()
			remote, _, err := storeurl.Open(location(p.Addr()))
			if err != nil {
				t.Fatal(err)
			}
			fn := (&faultNode{}).start(t, len(faults)+coldFrom, func(store.Store) store.Store { return remote })
			fn.check(t, "file00")
			for i, f := range faults {
				if f.onAuth && !be.auth {
					continue
				}
				name := fmt.Sprintf("file%02d", i+coldFrom)
				t.Run(f.name, func(t *testing.T) {
					defer heal()
					f.set(p)
					fn.check(t, "file00") // read before: served from the node
					during := randomBytes(t, 256<<10)
					writeSynced(t, fn.path("during-"+name), during)
					fn.files["during-"+name] = during
					if !f.lasts {
						if err := fn.checkBlock(name); err != nil {
							t.Fatalf("cold read: %v", err)
						}
						return
					}
					failedBefore := len(fn.log.lines(`"chunk-fetch-failed"`))
					if err := fn.checkBlock(name); !errors.Is(err, syscall.EIO) {
						t.Fatalf("cold read: %v, want EIO", err)
					}
					if len(fn.log.lines(`"chunk-fetch-failed"`)) == failedBefore {
						t.Fatal("no chunk-fetch-failed log line")
					}
					heal()
					if err := fn.checkBlock(name); err != nil {
						t.Fatalf("the same read once healed: %v", err)
					}
				})
			}
			fn.checkAll(t)
			fn.fsck(t)
			if s := p.Stats(); s.Statuses == 0 || s.Resets == 0 || (be.auth && s.Tokens < 2) {
				t.Fatalf("the proxy injected too little: %+v", s)
			}
		})
	}
}

// TestGCRemoteStores collects an S3 store (MinIO) and a registry store: a snapshot
// nothing uses goes, a volume's base and every chunk it names stay, the store then
// checks clean and the volume reads back byte for byte from a cold cache.
func TestGCRemoteStores(t *testing.T) {
	testutil.RequireTool(t, "docker-registry")
	ctx := context.Background()
	for _, be := range []string{"s3", "registry"} {
		t.Run(be, func(t *testing.T) {
			work := t.TempDir()
			var loc string
			if be == "s3" {
				m, err := services.StartMinIO(ctx, services.MinIOOptions{Dir: filepath.Join(work, "minio")})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Stop() })
				loc = m.Location("gcbucket", "chunks")
			} else {
				r, err := services.StartRegistry(ctx, services.RegistryOptions{Dir: filepath.Join(work, "registry")})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Stop() })
				loc = "registry://" + r.Addr + "/slacker/chunks"
			}
			remote, _, err := storeurl.Open(loc)
			if err != nil {
				t.Fatal(err)
			}
			d := testenv.StartDaemon(t, testenv.DaemonOptions{Size: 128 << 20,
				WrapStore: func(store.Store) store.Store { return remote },
				Lease:     slnode.LeaseConfig{Interval: 100 * time.Millisecond, Hold: 100 * time.Millisecond}})
			c := d.Client
			blank, err := c.Mkfs(ctx, api.MkfsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			write := func(id string, data []byte) api.Snapshot {
				t.Helper()
				v, err := c.CreateVolume(ctx, api.CreateVolumeRequest{ID: id, Snapshot: blank.ID, Mount: true})
				if err != nil {
					t.Fatal(err)
				}
				writeSynced(t, filepath.Join(v.Mountpoint, "data"), data)
				if err := c.UnmountVolume(ctx, id); err != nil {
					t.Fatal(err)
				}
				s, err := c.SnapshotVolume(ctx, id, api.SnapshotRequest{})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.DeleteVolume(ctx, id); err != nil {
					t.Fatal(err)
				}
				return s
			}
			kept := randomBytes(t, 2<<20)
			keep := write("keep", kept)
			junk := write("junk", randomBytes(t, 2<<20))
			v, err := c.CreateVolume(ctx, api.CreateVolumeRequest{ID: "user", Snapshot: keep.ID, Mount: true, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // the holds of the snapshots just written pass
			rep, err := gc.Collect(ctx, remote, gc.Options{Grace: 0, Skew: -1})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Deleted < junk.NewChunks+1 || rep.Snapshots < 1 {
				t.Fatalf("collection: %+v (the junk snapshot had %d new chunks)", rep, junk.NewChunks)
			}
			if ok, _ := store.Exists(ctx, remote, junk.ID); ok {
				t.Fatal("the unused snapshot survived")
			}
			crep, err := gc.Check(ctx, remote, gc.CheckOptions{Roots: []gc.Root{{Snapshot: keep.ID, From: "test"}}, ReadData: true})
			if err != nil || !crep.OK() {
				t.Fatalf("check: %+v %v", crep, err)
			}
			if err := c.DropCaches(ctx, true); err != nil {
				t.Fatal(err)
			}
			if got, err := readDirect(filepath.Join(v.Mountpoint, "data")); err != nil || !bytes.Equal(got, kept) {
				t.Fatalf("the volume's file after the collection: %v", err)
			}
			if err := c.DeleteVolume(ctx, "user"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
