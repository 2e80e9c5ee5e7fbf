package storeurl

import (
	"strings"
	"testing"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		loc, wantDesc, wantErr string
	}{
		{loc: dir, wantDesc: "local:" + dir},
		{loc: "local:" + dir, wantDesc: "local:" + dir},
		{loc: "s3://AK:TOPSECRET@127.0.0.1:9/bucket/prefix?insecure=1", wantDesc: "s3:http://127.0.0.1:9/bucket/prefix/"},
		{loc: "registry://127.0.0.1:9/slacker/chunks", wantDesc: "registry://127.0.0.1:9/slacker/chunks"},
		{loc: "", wantErr: "no store"},
		{loc: "ftp://user:TOPSECRET@host/x", wantErr: "unsupported scheme"},
		{loc: "s3://AK:TOPSECRET@host/", wantErr: "no bucket"},
		{loc: "registry://host", wantErr: "want registry://"},
	}
	for _, tc := range tests {
		_, desc, err := Open(tc.loc)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: %v, want error %q", tc.loc, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "TOPSECRET") {
				t.Errorf("%s: the error shows the secret: %v", tc.loc, err)
			}
			continue
		}
		if err != nil || desc != tc.wantDesc {
			t.Errorf("%s: %q, %v; want %q", tc.loc, desc, err, tc.wantDesc)
		}
		if strings.Contains(desc, "TOPSECRET") {
			t.Errorf("%s: the display form shows the secret", tc.loc)
		}
	}
}
