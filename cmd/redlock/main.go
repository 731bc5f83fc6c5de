// Command redlock shows the Redlock algorithm at work and puts it to use.
//
//	redlock demo [flags]
//	redlock run --nodes host:port,... --key K [flags] -- CMD [ARGS...]
//	redlock doctor --nodes host:port,... [flags]
//	redlock status --nodes host:port,... --key K [flags]
//	redlock --version
//
// demo starts in-process Redis nodes, lets workers contend for one lock
// while a fault script kills and restores nodes, and prints a live timeline.
// It needs no servers.
//
// run holds a lock on N independent Redis masters while CMD runs, extending
// it as needed, like flock(1) across machines.
//
// doctor checks the nodes against the assumptions the guarantees rest on
// (docs/safety.md): version, persistence, eviction, replication, identity,
// clock rate and count, with security advice besides. status shows, node by
// node, who holds a key, and whether a majority does.
//
// See docs/cli.md for flags, environment and exit codes.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

const usage = `usage:
  redlock demo [flags]                       watch Redlock work on 5 in-process nodes
  redlock run [flags] -- CMD [ARGS...]       run CMD while holding a distributed lock
  redlock doctor [flags]                     check the nodes against Redlock's assumptions
  redlock status --key K [flags]             show who holds K on each node

  redlock --version                          print the version this binary was built from

Run "redlock COMMAND -h" for a command's flags. run, doctor and status take
the nodes from --nodes or $REDLOCK_NODES, and a password from $REDLOCK_PASSWORD.
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
	case "doctor":
		return doctorMain(args[1:], getenv, stdout, stderr)
	case "status":
		return statusMain(args[1:], getenv, stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, versionLine(debug.ReadBuildInfo()))
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q\n%s", args[0], usage)
		return exitUsage
	}
}

// versionLine says which version of the module the binary was built from,
// as the build info records it: the module version for a binary from
// go install ...@v0.1.0; for one built in a git checkout, the version the
// go command derives from the tags and the commit (since Go 1.24: a tag,
// or a pseudo-version such as v0.0.0-20261126155941-6ee6b4f0d4ae, with
// +dirty for uncommitted changes); "(devel)" when the build recorded no
// version control information (-buildvcs=false, no git). The commit is
// added when the build recorded it.
func versionLine(bi *debug.BuildInfo, ok bool) string {
	if !ok {
		return "redlock: no build information in this binary (" + runtime.Version() + ")"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = ", modified"
			}
		}
	}
	line := "redlock " + v
	if rev != "" {
		line += " (commit " + rev[:min(12, len(rev))] + modified + ")"
	}
	return line + ", " + bi.GoVersion + " " + goosArch(bi)
}

// goosArch is the platform the binary was built for.
func goosArch(bi *debug.BuildInfo) string {
	goos, goarch := runtime.GOOS, runtime.GOARCH
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	return goos + "/" + goarch
}
