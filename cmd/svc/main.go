// Command svc is the inference gateway, its worker agent and their tools.
package main

import (
	"os"

	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/cli"
)

// Set with -ldflags "-X main.version=... -X main.commit=..." by releases.
var (
	version string
	commit  string
)

func main() {
	os.Exit(cli.Main(buildinfo.Read(version, commit)))
}
