package ext4meta

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/slacker-dev/slacker/internal/testutil"
)

// mkfs makes an ext4 image of size bytes (mkfs.ext4 -d: no mount) holding files
// spread over several directories, with mkfs's extra options, and returns its path.
func mkfs(t *testing.T, size int64, opts ...string) string {
	t.Helper()
	testutil.RequireTool(t, "mkfs.ext4", "debugfs", "dumpe2fs")
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	for d := range 40 {
		sub := filepath.Join(src, fmt.Sprintf("pkg%02d", d))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range 60 {
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("mod%02d.py", f)), []byte(strings.Repeat("x", 100*f)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	img := filepath.Join(dir, "fs.img")
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-F", "-q", "-d", src}, opts...)
	if out, err := exec.Command("mkfs.ext4", append(args, img)...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	return img
}

// dumpe2fsTables reads each group's inode table and unused inodes from dumpe2fs.
func dumpe2fsTables(t *testing.T, img string) (tables []int64, unused []int64, blockSize, inodeSize, perGroup int64) {
	t.Helper()
	out, err := exec.Command("dumpe2fs", img).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs: %v: %s", err, out)
	}
	field := func(name string) int64 {
		m := regexp.MustCompile(`(?m)^` + name + `:\s+(\d+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("dumpe2fs: no %s", name)
		}
		v, _ := strconv.ParseInt(string(m[1]), 10, 64)
		return v
	}
	blockSize, inodeSize, perGroup = field("Block size"), field("Inode size"), field("Inodes per group")
	// One section per group; dumpe2fs leaves "N unused inodes" out where N is 0.
	for _, sec := range regexp.MustCompile(`(?m)^Group \d+:`).Split(string(out), -1)[1:] {
		m := regexp.MustCompile(`Inode table at (\d+)-`).FindStringSubmatch(sec)
		if m == nil {
			t.Fatalf("dumpe2fs: a group without an inode table: %s", sec)
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		tables = append(tables, v)
		var u int64
		if m := regexp.MustCompile(`(\d+) unused inodes`).FindStringSubmatch(sec); m != nil {
			u, _ = strconv.ParseInt(m[1], 10, 64)
		}
		unused = append(unused, u)
	}
	if len(tables) == 0 {
		t.Fatal("dumpe2fs: no groups")
	}
	return tables, unused, blockSize, inodeSize, perGroup
}

// The ranges are the groups' tables as dumpe2fs shows them, cut to the inodes
// in use, and every file's inode (where debugfs says it is) lies in one.
func TestInodeTables(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []string
	}{
		{"default", nil},
		{"32-bit, no flex_bg", []string{"-O", "^64bit,^flex_bg"}},
		{"1 KiB blocks", []string{"-b", "1024"}},
		{"no checksums: whole tables", []string{"-O", "^metadata_csum,^uninit_bg"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := mkfs(t, 300<<20, c.opts...)
			f, err := os.Open(img)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			got, err := InodeTables(f, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			tables, unused, bs, is, per := dumpe2fsTables(t, img)
			var want []Range
			for g := range tables {
				if used := per - unused[g]; used > 0 {
					want = append(want, Range{tables[g] * bs, used * is})
				}
			}
			covered := func(off int64) bool {
				for _, r := range got {
					if off >= r.Off && off < r.Off+r.Len {
						return true
					}
				}
				return false
			}
			for _, w := range want {
				if !covered(w.Off) || !covered(w.Off+w.Len-1) {
					t.Errorf("table range %+v (dumpe2fs) not returned: got %+v", w, got)
				}
			}
			var total, wantTotal int64
			for _, r := range got {
				total += r.Len
			}
			for _, w := range want {
				wantTotal += w.Len
			}
			if total != wantTotal {
				t.Errorf("ranges cover %d bytes, dumpe2fs's tables in use %d", total, wantTotal)
			}
			for _, p := range []string{"/pkg00/mod00.py", "/pkg20/mod31.py", "/pkg39/mod59.py", "/pkg39"} {
				out, err := exec.Command("debugfs", "-R", "imap "+p, img).CombinedOutput()
				if err != nil {
					t.Fatalf("debugfs imap %s: %v: %s", p, err, out)
				}
				m := regexp.MustCompile(`located at block (\d+), offset 0x([0-9a-f]+)`).FindSubmatch(out)
				if m == nil {
					t.Fatalf("debugfs imap %s: %s", p, out)
				}
				blk, _ := strconv.ParseInt(string(m[1]), 10, 64)
				off, _ := strconv.ParseInt(string(m[2]), 16, 64)
				if !covered(blk*bs + off) {
					t.Errorf("%s's inode at byte %d is in no range %+v", p, blk*bs+off, got)
				}
			}
		})
	}
}

// Anything that is not an ext4 superblock with sane descriptors is refused.
func TestNotExt4(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":   nil,
		"zeros":   make([]byte, 64<<10),
		"short":   make([]byte, 1500),
		"garbage": bytes.Repeat([]byte{0xEF, 0x53, 0x12}, 30000),
	} {
		if _, err := InodeTables(bytes.NewReader(b), int64(len(b))); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	sb := make([]byte, 8192)
	sb[1024+0x38], sb[1024+0x39] = 0x53, 0xEF // the magic, nothing else
	if _, err := InodeTables(bytes.NewReader(sb), int64(len(sb))); !errors.Is(err, ErrNotExt4) {
		t.Errorf("magic alone: %v, want ErrNotExt4", err)
	}
}

func FuzzInodeTables(f *testing.F) {
	f.Add(make([]byte, 4096))
	if _, err := os.Stat("/usr/sbin/mkfs.ext4"); err == nil {
		dir := f.TempDir()
		img := filepath.Join(dir, "fs.img")
		os.WriteFile(img, nil, 0o644)
		os.Truncate(img, 8<<20)
		if exec.Command("mkfs.ext4", "-F", "-q", img).Run() == nil {
			if b, err := os.ReadFile(img); err == nil {
				f.Add(b[:16<<10])
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		size := int64(len(b)) * 1024 // a volume larger than what the fuzzer gives: reads past it fail
		rs, err := InodeTables(bytes.NewReader(b), size)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.Off < 0 || r.Len <= 0 || r.Off+r.Len > size {
				t.Fatalf("range %+v outside a volume of %d bytes", r, size)
			}
		}
	})
}
