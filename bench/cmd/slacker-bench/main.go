// Command slacker-bench runs Slacker's benchmarks: the core benchmark, HelloBench
// and the papers' evaluation (see bench/README.md). It is built beside slacker and
// slackerd (scripts/setup.sh) and drives them.
package main

import (
	"os"

	"github.com/slacker-dev/slacker/bench/cli"
)

func main() { os.Exit(cli.Execute()) }
