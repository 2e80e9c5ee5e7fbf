package runc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EtcFiles are the files WriteEtc writes and Spec bind-mounts under /etc when
// Config.EtcDir is set.
var EtcFiles = []string{"hosts", "hostname", "resolv.conf"}

// EtcHosts is the /etc/hosts a container with its own network namespace gets: what
// Docker writes, with the container's hostname on a loopback address (the namespace
// has only loopback), so that programs resolving localhost or their own name work.
func EtcHosts(hostname string) string {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")
	if hostname != "" && hostname != "localhost" {
		fmt.Fprintf(&b, "127.0.1.1\t%s\n", hostname)
	}
	return b.String()
}

// ResolvConf returns the resolver configuration a container gets from the host's:
// with its own network namespace, nameservers on loopback are dropped (they would be
// the container's own loopback), as Docker does.
func ResolvConf(host []byte, hostNetwork bool) string {
	if hostNetwork {
		return string(host)
	}
	var b strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(host))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" &&
			(strings.HasPrefix(f[1], "127.") || f[1] == "::1") {
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// WriteEtc writes hosts, hostname and resolv.conf for a container into dir (created
// if needed). With hostNetwork the host's /etc/hosts is copied, as Docker does.
func WriteEtc(dir, hostname string, hostNetwork bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := EtcHosts(hostname)
	if hostNetwork {
		if b, err := os.ReadFile("/etc/hosts"); err == nil {
			hosts = string(b)
		}
	}
	resolv, _ := os.ReadFile("/etc/resolv.conf")
	files := map[string]string{
		"hosts":       hosts,
		"hostname":    hostname + "\n",
		"resolv.conf": ResolvConf(resolv, hostNetwork),
	}
	for _, f := range EtcFiles {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(files[f]), 0o644); err != nil {
			return fmt.Errorf("write container /etc/%s: %w", f, err)
		}
	}
	return nil
}
