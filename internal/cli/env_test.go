package cli

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

// A flag beats its variable, but a repeatable flag adds to it: the
// variable's engine and the command line's both run.
func TestApplyEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		engines []string
		gateway string
	}{
		{"variables alone", nil, map[string]string{"SVC_ENGINE": "sim", "SVC_GATEWAY": "http://a"}, []string{"sim"}, "http://a"},
		{"flags beat a variable", []string{"--gateway", "http://b"}, map[string]string{"SVC_GATEWAY": "http://a"}, nil, "http://b"},
		{"a repeatable flag adds to its variable", []string{"--engine", "ollama=http://o"},
			map[string]string{"SVC_ENGINE": "openai=http://v"}, []string{"openai=http://v", "ollama=http://o"}, ""},
		{"flags alone", []string{"--engine", "sim", "--engine", "espeak-ng"}, nil, []string{"sim", "espeak-ng"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var engines []string
			var gateway string
			cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
			cmd.Flags().StringArrayVar(&engines, "engine", nil, "")
			cmd.Flags().StringVar(&gateway, "gateway", "", "")
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			getenv := func(k string) string { return tc.env[k] }
			if err := applyEnv(cmd, getenv, envFlag{"engine", "SVC_ENGINE"}, envFlag{"gateway", "SVC_GATEWAY"}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(engines, tc.engines) || gateway != tc.gateway {
				t.Fatalf("engines %q, gateway %q; want %q, %q", engines, gateway, tc.engines, tc.gateway)
			}
		})
	}
}

// An explicitly empty --data (a "$DIR" left unset) is a usage error, not
// the default directory; an empty $SVC_DATA counts as unset.
func TestEmptyDataFlag(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		env   string
		usage bool
	}{
		{[]string{"--data", ""}, "", true},
		{[]string{"--data="}, "/srv/svc", true},
		{nil, "", false},
		{[]string{"--data", "/srv/svc"}, "", false},
	} {
		var data string
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		cmd.Flags().StringVar(&data, "data", "", "")
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		err := applyEnv(cmd, func(string) string { return tc.env }, envFlag{"data", "SVC_DATA"})
		if (exitCode(err) == exitUsage) != tc.usage {
			t.Errorf("%q with SVC_DATA=%q: %v", tc.args, tc.env, err)
		}
	}
}
