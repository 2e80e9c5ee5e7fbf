package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/slacker-dev/slacker/internal/api"
	"github.com/slacker-dev/slacker/internal/containers"
	"github.com/slacker-dev/slacker/internal/names"
	"github.com/slacker-dev/slacker/internal/progress"
	"github.com/slacker-dev/slacker/internal/registry"
)

// env is what every command shares.
type env struct {
	socket   string
	jsonOut  bool
	quiet    bool
	debug    bool
	insecure bool
	stdout   io.Writer
	stderr   io.Writer
	stdin    io.Reader

	client *api.Client
	info   api.Info
	names  *names.Store
	ctrs   *containers.Manager
	log    *slog.Logger
}

// exitError carries an exit code for Execute.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// Execute runs the CLI with os.Args and returns the process exit code.
func Execute() int {
	e := &env{stdout: os.Stdout, stderr: os.Stderr, stdin: os.Stdin}
	cmd := newRoot(e)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code, line := Exit(cmd.ExecuteContext(ctx))
	if line != "" {
		fmt.Fprintln(e.stderr, line)
	}
	return code
}

// Exit is the CLI's one translation of a command's error: the exit code and the line
// for stderr ("" for none). An exitError carries its own code (run: 125 for its own
// failures, the container's code otherwise); every other error exits 1 whatever its
// errdefs kind, as container tools do, and its message says the rest: the message
// names the kind in its own words ("no such container", "registry unreachable").
func Exit(err error) (int, string) {
	if err == nil {
		return 0, ""
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err == nil {
			return ee.code, ""
		}
		return ee.code, "slacker: " + ee.err.Error()
	}
	return 1, "slacker: " + err.Error()
}

func newRoot(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:   "slacker",
		Short: "Start containers without copying their images",
		Long: `slacker converts OCI images into block-level snapshots, publishes them through
any OCI registry as kilobyte-sized descriptors, and runs containers whose root
filesystems are fetched lazily, block by block, as they are read.

It talks to slackerd, the node daemon, on ` + api.DefaultSocket + `.`,
		Example: `  slacker convert oci:./debian-layout:bookworm debian:bookworm
  slacker push debian:bookworm 127.0.0.1:5000/slacker/debian:bookworm
  slacker pull 127.0.0.1:5000/slacker/debian:bookworm
  slacker run --rm 127.0.0.1:5000/slacker/debian:bookworm -- echo hello`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	def := api.DefaultSocket
	if s := os.Getenv("SLACKER_SOCKET"); s != "" {
		def = s
	}
	pf.StringVar(&e.socket, "socket", def, "slackerd's API socket (env SLACKER_SOCKET)")
	pf.BoolVar(&e.debug, "debug", false, "log debug detail to stderr")
	pf.BoolVar(&e.insecure, "insecure-registry", false, "talk plain HTTP to registries, never trying HTTPS first (loopback and private addresses fall back to HTTP after an HTTPS attempt)")
	root.AddCommand(
		newConvert(e), newOptimize(e), newPush(e), newPull(e), newImages(e), newRmi(e), newTag(e),
		newRun(e), newPs(e), newRm(e), newCommit(e), newStats(e), newInfo(e),
	)
	root.AddCommand(newDoctor(e))
	root.AddCommand(newGC(e), newCheck(e))
	return root
}

// connect reaches slackerd and opens the name store and container manager.
func (e *env) connect(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("must run as root: slackerd's socket and the container roots it mounts are root's")
	}
	level := slog.LevelWarn
	if e.debug {
		level = slog.LevelDebug
	}
	e.log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))
	e.client = api.NewClient(e.socket)
	info, err := e.client.Info(ctx)
	if err != nil {
		return err
	}
	e.info = info
	if e.names, err = names.Open(filepath.Join(info.StateRoot, "images")); err != nil {
		return err
	}
	e.ctrs, err = containers.NewManager(info.StateRoot, e.client)
	return err
}

func (e *env) regOpts() registry.Options { return registry.Options{Insecure: e.insecure} }

func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (e *env) table() *tabwriter.Writer {
	return tabwriter.NewWriter(e.stdout, 0, 4, 3, ' ', 0)
}

// reporter is how long commands show their progress, on stderr: a bar on a
// terminal, plain lines elsewhere, JSON lines with --json, nothing with -q.
func (e *env) reporter() progress.Reporter {
	return progress.New(e.stderr, progress.Options{Quiet: e.quiet, JSON: e.jsonOut})
}

// phases shows the phases of a long call (gc: list, mark, sweep; check: read) as
// tasks of r, one after the other.
type phases struct {
	r     progress.Reporter
	name  string // the command's, before each phase's name
	phase string
	done  int64
	task  progress.Task
}

// update is told how far phase has come.
func (p *phases) update(phase string, done, total int64) {
	if phase != p.phase {
		p.end()
		p.phase, p.done = phase, 0
		p.task = p.r.Start(p.name+": "+phase, total, progress.Items)
	}
	if done > p.done {
		p.task.Add(done - p.done)
		p.done = done
	}
}

// end ends the phase under way.
func (p *phases) end() {
	if p.task != nil {
		p.task.Done()
		p.task = nil
	}
}
