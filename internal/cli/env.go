package cli

import (
	"errors"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envFlag names the environment variable a flag falls back to.
type envFlag struct{ flag, env string }

// applyEnv sets each flag the user did not give from its environment
// variable, so flag > env > default. Defaults stay static, which keeps help,
// man pages and completions independent of the environment they were
// generated in.
//
// A repeatable flag is the exception: its variable holds one value, and
// the command line adds more (a unit's environment file names an engine,
// its extra flags a second), rather than dropping it without a word.
func applyEnv(cmd *cobra.Command, getenv func(string) string, pairs ...envFlag) error {
	for _, p := range pairs {
		fl := cmd.Flags().Lookup(p.flag)
		if fl == nil {
			continue
		}
		if fl.Changed {
			if p.flag == "data" && fl.Value.String() == "" {
				// --data "$DIR" with DIR unset: the default directory
				// would get a new store, organisation and key unseen.
				return usageErrorf("--data is empty: name the data directory, or leave the flag out for the default")
			}
			sv, repeatable := fl.Value.(pflag.SliceValue)
			if v := getenv(p.env); v != "" && repeatable && fl.Value.Type() == "stringArray" {
				if err := sv.Replace(append([]string{v}, sv.GetSlice()...)); err != nil {
					return usageErrorf("invalid $%s: %v", p.env, err)
				}
			}
			continue
		}
		if v := getenv(p.env); v != "" {
			if err := fl.Value.Set(v); err != nil {
				return usageErrorf("invalid $%s: %v", p.env, err)
			}
		}
	}
	return nil
}

// defaultDataDir is $XDG_DATA_HOME/svc, else ~/.local/share/svc.
func defaultDataDir(getenv func(string) string) (string, error) {
	if d := getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "svc"), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "share", "svc"), nil
	}
	return "", errors.New("cannot find a data directory: set --data, SVC_DATA, XDG_DATA_HOME or HOME")
}

// resolveDataDir returns dir, or the default when it is empty.
func resolveDataDir(dir string, getenv func(string) string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	return defaultDataDir(getenv)
}

const dataFlagHelp = "data directory (env SVC_DATA; default $XDG_DATA_HOME/svc or ~/.local/share/svc)"
