// Package cli is the slacker command line: cobra commands that parse flags, call
// slackerd (package api), the converters, the name store and the container manager,
// and print tables (or JSON with --json) and one clear line per error. It is the one
// place that maps errors to exit codes (Exit): a container's own exit code from
// `run`, 125 when slacker itself failed before or around it (as Docker does), 1
// otherwise, whatever the error's errdefs kind.
package cli
