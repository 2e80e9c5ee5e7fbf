package corpus

import (
	"slices"
	"testing"
)

func TestAnalyzeCmd(t *testing.T) {
	tests := []struct {
		name     string
		cmd      []string
		programs []string
		files    []string
	}{
		{"plain", []string{"echo", "hello"}, []string{"echo"}, nil},
		{"absolute program", []string{"/bin/busybox", "echo", "hello"}, []string{"/bin/busybox"}, nil},
		{"config argument", []string{"docker-registry", "serve", "/etc/docker/registry/config.yml"},
			[]string{"docker-registry"}, []string{"/etc/docker/registry/config.yml"}},
		{"flag=path", []string{"prometheus", "--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/tmp/prom"},
			[]string{"prometheus"}, []string{"/etc/prometheus/prometheus.yml"}},
		{"script", []string{"sh", "-c", "gcc -O2 -o /tmp/hello /src/hello.c && /tmp/hello"},
			[]string{"sh", "gcc"}, []string{"/src/hello.c"}},
		{"env and exec", []string{"sh", "-c", "cd /src && HOME=/tmp GOCACHE=/tmp/gocache exec go run hello.go"},
			[]string{"sh", "go"}, []string{"/src"}},
		{"made by the script", []string{"sh", "-c", "mkdir -p /srv/x && cd /srv/x && touch /srv/f && cat /srv/f"},
			[]string{"sh", "mkdir", "touch", "cat"}, nil},
		{"sourced file and expansions", []string{"sh", "-c", ". /etc/apache2/envvars && mkdir -p $APACHE_RUN_DIR && exec apache2 -DFOREGROUND"},
			[]string{"sh", "mkdir", "apache2"}, []string{"/etc/apache2/envvars"}},
		{"java opts", []string{"sh", "-c", "cd /usr/share/jetty9 && exec java -Djetty.home=/usr/share/jetty9 -jar start.jar"},
			[]string{"sh", "java"}, []string{"/usr/share/jetty9"}},
		{"redirects", []string{"sh", "-c", "/usr/lib/postgresql/15/bin/initdb -D /tmp/pg >/dev/null && exec /usr/lib/postgresql/15/bin/postgres -D /tmp/pg -k /tmp"},
			[]string{"sh", "/usr/lib/postgresql/15/bin/initdb", "/usr/lib/postgresql/15/bin/postgres"}, nil},
		{"pipe and semicolon", []string{"bash", "-c", "ls /opt/app | wc -l; true"},
			[]string{"bash", "ls", "wc"}, []string{"/opt/app"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := AnalyzeCmd(tt.cmd)
			if !slices.Equal(n.Programs, tt.programs) {
				t.Errorf("programs %q, want %q", n.Programs, tt.programs)
			}
			if !slices.Equal(n.Files, tt.files) {
				t.Errorf("files %q, want %q", n.Files, tt.files)
			}
		})
	}
}

func TestAnalyzeRealWorkloads(t *testing.T) {
	// Every real workload yields at least its cmd[0], and no runtime path.
	for _, w := range realWorkloads(t) {
		n := AnalyzeCmd(w.Cmd)
		if len(n.Programs) == 0 || n.Programs[0] != w.Cmd[0] {
			t.Errorf("%s: programs %v", w.Name, n.Programs)
		}
		for _, f := range n.Files {
			for _, d := range runtimeDir {
				if f == d || len(f) > len(d) && f[:len(d)+1] == d+"/" {
					t.Errorf("%s: runtime path %s flagged", w.Name, f)
				}
			}
		}
	}
}
