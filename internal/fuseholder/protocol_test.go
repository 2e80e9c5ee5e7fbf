package fuseholder

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeRequest(t *testing.T) {
	good := map[string]request{
		`{"version":1,"op":"hello"}`:                                         {Version: 1, Op: opHello},
		`{"version":1,"op":"take","later":"ignored"}`:                        {Version: 1, Op: opTake},
		`{"version":1,"op":"hold","init":"KAAAAA==","mountpoint":"/m"}`:      {Version: 1, Op: opHold, Init: []byte{40, 0, 0, 0}, Mountpoint: "/m"},
		`{"version":1,"op":"release"}` + "\n":                                {Version: 1, Op: opRelease},
		`{"version":1,"op":"hold","init":"AA==","mountpoint":"/a b/\u00e9"}`: {Version: 1, Op: opHold, Init: []byte{0}, Mountpoint: "/a b/é"},
	}
	for in, want := range good {
		got, err := decodeRequest([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	bad := map[string]string{
		``:                             "empty",
		`null`:                         "not a JSON object",
		`[]`:                           "not a JSON object",
		`{}`:                           "no protocol version",
		`{"op":"hello"}`:               "no protocol version",
		`{"version":2,"op":"hello"}`:   "speaks version 1",
		`{"version":1}`:                "no op",
		`{"version":1,"op":"steal"}`:   "unknown op",
		`{"version":1,"op":"hello"}{}`: "trailing",
		`{"version":1,"op":"hello","mountpoint":"/m"}`:                   "takes no session",
		`{"version":1,"op":"hold","mountpoint":"/m"}`:                    "without its INIT",
		`{"version":1,"op":"hold","init":"AA=="}`:                        "without its mountpoint",
		`{"version":1,"op":"hold","init":"AA==","mountpoint":"m"}`:       "not absolute",
		`{"version":1,"op":"hold","init":"AA==","mountpoint":"/\u0000"}`: "NUL",
		`{"version":1,"op":"hold","init":"!!","mountpoint":"/m"}`:        "illegal base64",
		`{"version":"1","op":"hello"}`:                                   "cannot unmarshal",
	}
	for in, want := range bad {
		_, err := decodeRequest([]byte(in))
		if err == nil || !errors.Is(err, errMalformed) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a malformed error containing %q", in, err, want)
		}
	}
	if _, err := decodeRequest(bytes.Repeat([]byte{' '}, MaxMessage+1)); err == nil {
		t.Error("a message longer than MaxMessage decoded")
	}
	long := `{"version":1,"op":"hold","init":"` + strings.Repeat("A", (MaxInit+3)/3*4+4) + `","mountpoint":"/m"}`
	if _, err := decodeRequest([]byte(long)); err == nil || !strings.Contains(err.Error(), "INIT request of") {
		t.Errorf("an INIT longer than MaxInit: %v", err)
	}
}

func TestDecodeReply(t *testing.T) {
	for in, want := range map[string]reply{
		`{"version":1}`:              {Version: 1},
		`{"version":1,"pid":7}`:      {Version: 1, PID: 7},
		`{"version":1,"error":"no"}`: {Version: 1, Error: "no"},
		`{"version":1,"held":true,"init":"AQ==","mountpoint":"/m"}`: {Version: 1, Held: true, Init: []byte{1}, Mountpoint: "/m"},
	} {
		got, err := decodeReply([]byte(in))
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		`{"version":1,"held":true}`:                            "without its INIT",
		`{"version":1,"init":"AQ==","mountpoint":"/m"}`:        "holds none",
		`{"version":1,"error":"x","held":true}`:                "error reply carries a session",
		`{"version":1,"pid":-1}`:                               "negative pid",
		`{"version":3}`:                                        "protocol version 3",
		`{"version":3,"error":"this holder speaks version 3"}`: "speaks version 3",
	} {
		if _, err := decodeReply([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", in, err, want)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, r := range []request{
		{Version: 1, Op: opHello}, {Version: 1, Op: opTake}, {Version: 1, Op: opRelease},
		{Version: 1, Op: opHold, Init: []byte("\x28\x00\x00\x00\x1a\x00\x00\x00"), Mountpoint: "/run/slacker/fuse"},
	} {
		b, err := encode(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"version":2,"op":"hold","init":"","mountpoint":"/\u2028"}`))
	f.Add([]byte(`{"version":1,"op":"hold","init":null,"mountpoint":"/m","version":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRequest(b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		// What decodes encodes, and decodes to the same request.
		again, err := encode(r)
		if err != nil {
			t.Fatalf("decoded request does not encode: %v", err)
		}
		r2, err := decodeRequest(again)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v, %v; want %+v", r2, err, r)
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	for _, r := range []reply{
		{Version: 1}, {Version: 1, PID: 42}, {Version: 1, Error: "not the owner"},
		{Version: 1, Held: true, Init: []byte{0, 1, 2, 0xff}, Mountpoint: "/m n"},
	} {
		b, err := encode(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"version":1,"held":false,"init":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeReply(b)
		if err != nil {
			return
		}
		again, err := encode(r)
		if err != nil {
			t.Fatalf("decoded reply does not encode: %v", err)
		}
		r2, err := decodeReply(again)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip: %+v, %v; want %+v", r2, err, r)
		}
	})
}

const sampleMountinfo = `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
25 22 0:23 / /sys rw,nosuid shared:2 - sysfs sysfs rw
90 25 0:51 / /run/slacker/fuse rw,nosuid,nodev,relatime shared:40 - fuse.slackerd slackerd rw,user_id=0,group_id=0
91 25 0:52 / /mnt/with\040space\011tab\134 rw - fuse fuse rw
92 25 8:3 / /mnt/blk rw master:3 - fuseblk /dev/sda3 rw
93 25 0:60 / /run/slacker/fuse rw shared:41 - fuse.slackerd slackerd rw
94 25 0:61 / /mnt/blk/over rw - tmpfs tmpfs rw
`

func TestParseMountinfo(t *testing.T) {
	es, err := parseMountinfo([]byte(sampleMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 7 {
		t.Fatalf("%d entries, want 7", len(es))
	}
	want := mountEntry{Major: 0, Minor: 52, MountPoint: "/mnt/with space\ttab\\", FSType: "fuse"}
	if es[3] != want {
		t.Errorf("escaped entry: %+v, want %+v", es[3], want)
	}
	for _, bad := range []string{
		"1 2 0:1 / /m rw shared:1 fuse x rw\n", // no "-"
		"1 2 0:1 / /m rw -\n",                  // nothing after "-"
		"1 2 01 / /m rw - fuse x rw\n",         // device without ":"
		"1 2 0:x / /m rw - fuse x rw\n",        // device not a number
		"1 2 0:1 / /m\\04 rw - fuse x rw\n",    // cut escape
		"1 2 0:1 / /m\\999 rw - fuse x rw\n",   // not octal
	} {
		if _, err := parseMountinfo([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestFindConnection(t *testing.T) {
	dir := t.TempDir()
	mi := filepath.Join(dir, "mountinfo")
	if err := os.WriteFile(mi, []byte(sampleMountinfo), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(dir, "connections")
	// fusectl names a connection by the kernel's dev_t: major<<20 | minor.
	for _, name := range []string{"60", "52", "8388611"} {
		if err := os.MkdirAll(filepath.Join(ctl, name), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ctl, name, "abort"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for mp, want := range map[string]string{
		"/run/slacker/fuse/":     "60", // the later of two mounts on one path
		"/mnt/with space\ttab\\": "52",
		"/mnt/blk":               "8388611",
	} {
		c := findConnection(mi, ctl, mp)
		if c.Name != want || c.Abort == nil {
			t.Errorf("%q: connection %q (abort %v, %s), want %q", mp, c.Name, c.Abort, c.Why, want)
		}
		c.close()
	}
	for mp, why := range map[string]string{
		"/mnt/blk/over": "no FUSE mount",
		"/proc":         "no FUSE mount",
	} {
		if c := findConnection(mi, ctl, mp); c.Name != "" || c.Abort != nil || !strings.Contains(c.Why, why) {
			t.Errorf("%q: %+v, want none (%s)", mp, c, why)
		}
	}
	os.RemoveAll(filepath.Join(ctl, "60"))
	if c := findConnection(mi, ctl, "/run/slacker/fuse"); c.Name != "60" || c.Abort != nil || !strings.Contains(c.Why, "fusectl not mounted") {
		t.Errorf("no fusectl entry: %+v", c)
	}
	if c := findConnection(filepath.Join(dir, "none"), ctl, "/m"); c.Abort != nil || c.Why == "" {
		t.Errorf("no mountinfo: %+v", c)
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add([]byte(sampleMountinfo))
	f.Add([]byte("1 2 0:1 / /a\\040b rw - fuse x rw\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := parseMountinfo(b)
		if err != nil {
			return
		}
		// What parses, written again as the kernel writes it, parses the same.
		var again strings.Builder
		for _, e := range es {
			fmt.Fprintf(&again, "1 1 %d:%d / %s rw - %s src rw\n", e.Major, e.Minor, escapeMountinfo(e.MountPoint), e.FSType)
		}
		es2, err := parseMountinfo([]byte(again.String()))
		if err != nil || !reflect.DeepEqual(es, es2) {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", again.String(), es2, err, es)
		}
	})
}

// escapeMountinfo escapes a path as the kernel does in mountinfo.
func escapeMountinfo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ' ', '\t', '\n', '\\':
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
