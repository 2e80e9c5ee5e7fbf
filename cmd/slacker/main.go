// Command slacker is Slacker's command line: convert, push, pull and run images whose
// data is fetched lazily. See README.md and docs/.
package main

import (
	"os"

	"github.com/slacker-dev/slacker/internal/cli"
)

func main() { os.Exit(cli.Execute()) }
