package rig

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// runEntry is one file system object under an image's /run.
type runEntry struct {
	Path     string // relative to /run; "" is /run itself
	Type     byte   // tar.TypeDir, tar.TypeSymlink or tar.TypeReg
	Mode     int64  // permission bits with setuid/setgid/sticky, as in tar
	UID, GID int
	Link     string
	Data     []byte
}

// runTree is an image's /run: containerd's default spec mounts an empty tmpfs there,
// where Docker (and slacker run) leave the image's own, writable. Giving a ctr
// container a fresh copy of the image's /run restores Docker's behaviour (httpd's
// /var/lock -> /run/lock, mariadb's /run/mysqld).
type runTree struct {
	Present bool // the image has a /run directory
	Entries map[string]*runEntry
}

// maxRunFile bounds a regular file copied from an image's /run.
const maxRunFile = 1 << 20

// loadImage opens tag in the OCI layout at dir.
func loadImage(dir, tag string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open layout %s: %w", dir, err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == tag {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image tagged %q in %s", tag, dir)
}

// readRunTree collects the /run entries of img's layers, applying whiteouts.
func readRunTree(img v1.Image) (*runTree, error) {
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	t := &runTree{Entries: map[string]*runEntry{}}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, err
		}
		err = t.applyLayer(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
	}
	if root := t.Entries[""]; root != nil && root.Type == tar.TypeDir {
		t.Present = true
	}
	return t, nil
}

func (t *runTree) applyLayer(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if name == ".wh.run" || name == ".wh..wh..opq" { // /run deleted, or the root made opaque
			t.Entries = map[string]*runEntry{}
			continue
		}
		if name != "run" && !strings.HasPrefix(name, "run/") {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(name, "run"), "/")
		dir, base := path.Split(rel)
		dir = strings.TrimSuffix(dir, "/")
		switch {
		case base == ".wh..wh..opq":
			t.removeUnder(dir, false)
			continue
		case strings.HasPrefix(base, ".wh."):
			t.removeUnder(path.Join(dir, strings.TrimPrefix(base, ".wh.")), true)
			continue
		}
		e := &runEntry{Path: rel, Mode: h.Mode & 0o7777, UID: h.Uid, GID: h.Gid}
		switch h.Typeflag {
		case tar.TypeDir:
			e.Type = tar.TypeDir
		case tar.TypeSymlink:
			e.Type, e.Link = tar.TypeSymlink, h.Linkname
		case tar.TypeReg:
			if h.Size > maxRunFile {
				return fmt.Errorf("/%s: %d bytes, more than a /run file should hold", name, h.Size)
			}
			e.Type = tar.TypeReg
			if e.Data, err = io.ReadAll(tr); err != nil {
				return err
			}
		case tar.TypeLink:
			target := strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(path.Clean("/"+h.Linkname), "/"), "run"), "/")
			if src := t.Entries[target]; src != nil && src.Type == tar.TypeReg {
				c := *src
				c.Path = rel
				e = &c
			} else {
				continue
			}
		default:
			continue // devices and fifos have no place in a copied /run
		}
		if old := t.Entries[rel]; old != nil && (old.Type != tar.TypeDir || e.Type != tar.TypeDir) {
			t.removeUnder(rel, true)
		}
		t.Entries[rel] = e
	}
}

// removeUnder drops everything below p, and p itself if self.
func (t *runTree) removeUnder(p string, self bool) {
	for k := range t.Entries {
		if (self && k == p) || (p == "" && k != "") || strings.HasPrefix(k, p+"/") {
			delete(t.Entries, k)
		}
	}
}

// materialize writes a copy of the tree into dir (which must not exist). Every
// path is resolved inside dir: a symbolic link of the image never leads a write
// out of it.
func (t *runTree) materialize(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	paths := make([]string, 0, len(t.Entries))
	for p := range t.Entries {
		paths = append(paths, p)
	}
	sort.Strings(paths) // parents before children
	for _, p := range paths {
		e := t.Entries[p]
		name := "."
		if p != "" {
			name = filepath.FromSlash(p)
		}
		// A layer may leave a parent directory implied: make it as unpackers do.
		err := root.MkdirAll(filepath.Dir(name), 0o755)
		if err == nil {
			switch e.Type {
			case tar.TypeDir:
				if p != "" {
					err = root.Mkdir(name, 0o700)
				}
			case tar.TypeSymlink:
				err = root.Symlink(e.Link, name)
			case tar.TypeReg:
				err = root.WriteFile(name, e.Data, 0o600)
			}
		}
		if err == nil {
			err = root.Lchown(name, e.UID, e.GID)
		}
		if err == nil && e.Type != tar.TypeSymlink {
			err = root.Chmod(name, tarMode(e.Mode))
		}
		if err != nil {
			return fmt.Errorf("copy the image's /run: %w", err)
		}
	}
	return nil
}

// tarMode converts tar's permission bits (with setuid, setgid, sticky) to a FileMode.
func tarMode(m int64) os.FileMode {
	mode := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	return mode
}
