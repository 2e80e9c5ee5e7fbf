// Package progress shows how far a long command has come (convert, a pull that
// converts, push, gc, check): on a terminal, a bar with the amount done, its rate
// and an estimate of the time left, drawn by github.com/schollz/progressbar; where
// the output is not a terminal (a pipe, CI's log), plain lines, a task's state every
// few seconds and at its end; with --json, one JSON object per event for a script;
// with -q, nothing. The commands write their progress to stderr and their result to
// stdout, so a script reading stdout sees only the result.
//
// The packages that do the work (convert, gc) know nothing of how progress is
// shown: convert takes a Reporter, gc a callback; the CLI picks the Reporter.
package progress
