package mount

import (
	"slices"
	"strings"
	"testing"
)

func TestUnescape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/var/lib/x", "/var/lib/x"},
		{`/tmp/a\040b`, "/tmp/a b"},
		{`/tmp/tab\011x\134y`, "/tmp/tab\tx\\y"},
		{`/tmp/end\040`, "/tmp/end "},
		{`/tmp/short\04`, `/tmp/short\04`},
		{`/tmp/bad\xyz`, `/tmp/bad\xyz`},
	}
	for _, tt := range tests {
		if got := unescape(tt.in); got != tt.want {
			t.Errorf("unescape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	const table = `22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
41 22 7:3 / /var/lib/x/c1 rw shared:21 - ext4 /dev/loop3 rw
42 41 0:51 / /var/lib/x/c1/dev/shm rw shared:22 - tmpfs shm rw
43 22 0:52 / /var/lib/x2 rw shared:23 - tmpfs a\040b rw
44 22 0:53 / /var/lib/x/sp\040ace rw - overlay overlay rw
45 22 0:54 / /broken rw no separator here
`
	ms, err := ParseMountInfo(strings.NewReader(table), "/var/lib/x")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Target+" "+m.FSType+" "+m.Source)
	}
	want := []string{"/var/lib/x/sp ace overlay overlay", "/var/lib/x/c1/dev/shm tmpfs shm", "/var/lib/x/c1 ext4 /dev/loop3"}
	if !slices.Equal(got, want) {
		t.Errorf("under /var/lib/x: %q, want %q (deepest first; not /var/lib/x2)", got, want)
	}
	all, err := ParseMountInfo(strings.NewReader(table), "/")
	if err != nil || len(all) != 5 || all[4].Target != "/" || all[1].Source != "a b" {
		t.Errorf("all: %+v, %v", all, err)
	}
}
