// Package buildinfo describes the running binary: release version, commit
// and Go version.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Info identifies a build.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
}

// Read combines the values set with -ldflags (empty when not set) with what
// the Go toolchain recorded in the binary.
func Read(version, commit string) Info {
	info := Info{Version: version, Commit: commit, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		if info.Commit == "" {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					info.Commit = s.Value
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "dev"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// ShortCommit is the first 12 characters of the commit.
func (i Info) ShortCommit() string {
	if len(i.Commit) > 12 {
		return i.Commit[:12]
	}
	return i.Commit
}
