package units

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "512KiB": 512 << 10, "10G": 10 << 30, "1.5GiB": 3 << 29, "2MB": 2e6, " 64 MiB ": 64 << 20} {
		got, err := ParseBytes(in)
		if err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1", "10XB"} {
		if _, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) accepted", bad)
		}
	}
	if s := Bytes(3 << 29); s != "1.5 GiB" {
		t.Errorf("Bytes = %q", s)
	}
}
