package workload

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"sync"
)

// Ready is a readiness rule: when a run of a workload counts as finished. It is
// one of *Exit, *Log, *TCP or *HTTP. The harness observes the container and asks
// the rule's helpers; the rules themselves never do I/O.
type Ready interface {
	// Kind is "exit", "log", "tcp" or "http", the key used in the TOML file.
	Kind() string
	// String renders the rule as it is written in TOML, e.g. `{ tcp = 80 }`.
	String() string
	isReady()
}

// Exit is satisfied when the command exits with status Code. Any other status,
// or a timeout, is a failed run.
type Exit struct{ Code int }

// Log is satisfied by the first line of standard output or standard error that
// the regular expression matches (Go RE2 syntax, unanchored). A line ends at
// '\n'; a trailing '\r' is dropped. The rule is not satisfied by the exit of the
// command; an exit before a match is a failed run.
type Log struct {
	Pattern *regexp.Regexp
}

// TCP is satisfied when a TCP connect to Port of the container succeeds.
type TCP struct{ Port int }

// HTTP is satisfied when an HTTP GET of Path on Port of the container answers
// with any status below 500 (a 404 still proves the server is up).
type HTTP struct {
	Path string
	Port int
}

func (*Exit) isReady() {}
func (*Log) isReady()  {}
func (*TCP) isReady()  {}
func (*HTTP) isReady() {}

// Kind implements Ready.
func (*Exit) Kind() string { return "exit" }

// Kind implements Ready.
func (*Log) Kind() string { return "log" }

// Kind implements Ready.
func (*TCP) Kind() string { return "tcp" }

// Kind implements Ready.
func (*HTTP) Kind() string { return "http" }

func (r *Exit) String() string { return fmt.Sprintf("{ exit = %d }", r.Code) }
func (r *Log) String() string  { return fmt.Sprintf("{ log = %s }", strconv.Quote(r.Pattern.String())) }
func (r *TCP) String() string  { return fmt.Sprintf("{ tcp = %d }", r.Port) }
func (r *HTTP) String() string {
	return fmt.Sprintf("{ http = %s, port = %d }", strconv.Quote(r.Path), r.Port)
}

// Satisfied reports whether a command that exited with status code meets the rule.
func (r *Exit) Satisfied(code int) bool { return code == r.Code }

// MatchLine reports whether one line of output (without its newline) satisfies
// the rule.
func (r *Log) MatchLine(line string) bool { return r.Pattern.MatchString(line) }

// Address returns host:port to dial for the rule.
func (r *TCP) Address(host string) string { return net.JoinHostPort(host, strconv.Itoa(r.Port)) }

// URL returns the URL to GET for the rule on host.
func (r *HTTP) URL(host string) string {
	return "http://" + net.JoinHostPort(host, strconv.Itoa(r.Port)) + r.Path
}

// Accepts reports whether an HTTP answer with status satisfies the rule.
func (r *HTTP) Accepts(status int) bool { return status > 0 && status < 500 }

// maxLine bounds the bytes a LineMatcher buffers for one line. Longer lines are
// matched on their first maxLine bytes and the rest is skipped, so a process that
// prints without newlines cannot grow memory without bound.
const maxLine = 64 << 10

// LineMatcher feeds process output to a Log rule. Give each output stream its
// own Writer (Stream) so partial lines of stdout and stderr never mix. It is safe
// for concurrent use; after the first match further output is ignored.
type LineMatcher struct {
	rule *Log

	mu      sync.Mutex
	matched bool
	line    string
	done    chan struct{}
}

// NewLineMatcher returns a matcher for rule.
func NewLineMatcher(rule *Log) *LineMatcher {
	return &LineMatcher{rule: rule, done: make(chan struct{})}
}

// Stream returns a new io.Writer for one output stream.
func (m *LineMatcher) Stream() io.Writer { return &lineStream{m: m} }

// Done is closed at the first matching line.
func (m *LineMatcher) Done() <-chan struct{} { return m.done }

// Matched returns the first matching line and whether there was one.
func (m *LineMatcher) Matched() (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.line, m.matched
}

func (m *LineMatcher) offer(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.matched || !m.rule.Pattern.Match(line) {
		return
	}
	m.matched, m.line = true, string(line)
	close(m.done)
}

// Flush offers a stream's unterminated last line (call it when the stream ends).
func Flush(w io.Writer) {
	if s, ok := w.(*lineStream); ok {
		s.mu.Lock()
		buf := s.buf
		s.buf = nil
		s.mu.Unlock()
		if len(buf) > 0 {
			s.m.offer(buf)
		}
	}
}

type lineStream struct {
	m        *LineMatcher
	mu       sync.Mutex
	buf      []byte
	skipping bool // the current line overflowed maxLine and was already offered
}

func (s *lineStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if !s.skipping {
			room := maxLine - len(s.buf)
			if len(chunk) > room {
				s.buf = append(s.buf, chunk[:room]...)
				s.m.offer(s.buf)
				s.buf, s.skipping = s.buf[:0], true
			} else {
				s.buf = append(s.buf, chunk...)
			}
		}
		if i < 0 {
			break
		}
		if !s.skipping {
			s.m.offer(s.buf)
		}
		s.buf, s.skipping = s.buf[:0], false
		p = p[i+1:]
	}
	return n, nil
}
