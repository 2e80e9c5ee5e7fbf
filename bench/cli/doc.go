// Package cli is the slacker-bench command line (bench/cmd/slacker-bench): cobra
// commands for the core benchmark (`core`), HelloBench (`hello`, `report`, and the
// corpus of workload images: `corpus build|list|push|serve|synth|gc|rm`) and the
// papers' evaluation (`eval ITEM`, `eval report`), and the docs' figures rendered
// from the committed results (`docs`). It parses flags, finds the
// slacker and slackerd binaries (next to slacker-bench, or on PATH), calls the
// benchmark packages and prints their tables (or --json, --markdown); the work is
// theirs, and nothing here measures, mounts or builds itself. No product package
// imports it: slacker and slackerd never link a benchmark.
package cli
