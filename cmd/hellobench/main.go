// Command hellobench runs the HelloBench commands (`hellobench corpus build ...`)
// until they are mounted into the slacker CLI as `slacker bench`.
package main

import (
	"os"

	"github.com/slacker-dev/slacker/bench/hellobench/benchcmd"
)

func main() {
	cmd := benchcmd.NewCommand()
	cmd.Use = "hellobench"
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
