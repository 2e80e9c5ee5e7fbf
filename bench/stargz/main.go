// Command slacker-stargz runs stargz-snapshotter beside Slacker in HelloBench: it
// serves the snapshotter to containerd as a proxy plugin, pulls images through
// containerd with the labels that let the snapshotter mount layers lazily, and
// converts OCI images to eStargz, optionally with the files a recorded run of the
// workload read placed first (prioritized), as stargz's own `optimize` does.
//
// It is a benchmark-only program in a Go module of its own: slacker and slackerd
// do not depend on it, and its dependencies (containerd 2, stargz-snapshotter) stay
// out of the main module. The upstream commands (containerd-stargz-grpc, ctr-remote)
// live in a module the Go module proxy does not serve; this program is the small
// main written on the packages it does serve.
//
//	slacker-stargz serve   --root DIR --address SOCK [--insecure HOST:PORT ...]
//	slacker-stargz pull    --address CONTAINERD.SOCK [--namespace NS] [--snapshotter NAME] [--labels stargz|cri] [--plain-http] REF
//	slacker-stargz convert --layout DIR --tag TAG --out DIR [--prioritized FILE]
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), unix.SIGINT, unix.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(ctx, os.Args[2:])
	case "pull":
		err = pull(ctx, os.Args[2:])
	case "convert":
		err = convert(ctx, os.Args[2:])
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "slacker-stargz: unknown command %q\n", os.Args[1])
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "slacker-stargz %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  slacker-stargz serve   --root DIR --address SOCK [--insecure HOST:PORT ...]
  slacker-stargz pull    --address CONTAINERD.SOCK [--namespace NS] [--snapshotter NAME] [--labels stargz|cri] [--plain-http] REF
  slacker-stargz convert --layout DIR --tag TAG --out DIR [--prioritized FILE]
`)
	os.Exit(2)
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint(*m) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
