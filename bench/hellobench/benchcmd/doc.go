// Package benchcmd is the command line of HelloBench: `bench corpus build|list|
// push|serve|synth|gc`, ready to be mounted into the slacker CLI as `slacker
// bench`, with room for the harness (`bench hello`) next to `corpus`. It parses
// flags, builds the corpus options and prints tables (or --json); the work is
// done by bench/corpus, and nothing here mounts or builds itself.
package benchcmd
