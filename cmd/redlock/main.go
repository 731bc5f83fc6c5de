// Command redlock shows the Redlock algorithm at work and puts it to use.
//
//	redlock demo [flags]
//	redlock run --nodes host:port,... --key K [flags] -- CMD [ARGS...]
//
// demo starts in-process Redis nodes, lets workers contend for one lock
// while a fault script kills and restores nodes, and prints a live timeline.
// It needs no servers.
//
// run holds a lock on N independent Redis masters while CMD runs, extending
// it as needed, like flock(1) across machines. See docs/cli.md for flags,
// environment and exit codes.
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  redlock demo [flags]                       watch Redlock work on 5 in-process nodes
  redlock run [flags] -- CMD [ARGS...]       run CMD while holding a distributed lock

Run "redlock demo -h" or "redlock run -h" for the flags.
`

func main() {
	os.Exit(dispatch(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// dispatch runs the subcommand named by args[0] and returns the exit code.
func dispatch(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "demo":
		return demoMain(args[1:], stdout, stderr)
	case "run":
		return runMain(args[1:], getenv, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
}
