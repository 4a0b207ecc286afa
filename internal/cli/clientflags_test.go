package cli

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/client"
)

// wantUsage fails unless err is a usage error (exit 2).
func wantUsage(t *testing.T, err error) {
	t.Helper()
	if exitCode(err) != exitUsage {
		t.Fatalf("err = %v (exit %d), want a usage error", err, exitCode(err))
	}
}

func TestWorkersFlags(t *testing.T) {
	tests := []struct {
		args  []string
		json  bool
		usage bool
	}{
		{nil, false, false},
		{[]string{"--json"}, true, false},
		{[]string{"--jq", ".workers[].worker_name"}, true, false},
		{[]string{"--jq", ".workers["}, false, true},
		{[]string{"--jq", "nosuchfunc(1)"}, false, true},
		{[]string{"list"}, false, true},
		{[]string{"--colour"}, false, true},
	}
	for _, tt := range tests {
		got, err := parseOpts(t, NewCmdWorkers, cliRun{}, tt.args...)
		if tt.usage {
			wantUsage(t, err)
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if got.Exporter.Enabled() != tt.json || got.APIClient == nil {
			t.Errorf("%v: options %+v", tt.args, got)
		}
	}
}

func TestWorkersEventsFlags(t *testing.T) {
	tests := []struct {
		args  []string
		want  client.EventQuery
		usage bool
	}{
		{nil, client.EventQuery{Limit: 50}, false},
		{[]string{"--worker", "wk_1", "--type", "connected", "--limit", "1000", "--offset", "5"},
			client.EventQuery{WorkerID: "wk_1", EventType: "connected", Limit: 1000, Offset: 5}, false},
		{[]string{"--limit", "1"}, client.EventQuery{Limit: 1}, false},
		{[]string{"--limit", "0"}, client.EventQuery{}, true},
		{[]string{"--limit", "1001"}, client.EventQuery{}, true},
		{[]string{"--offset", "-1"}, client.EventQuery{}, true},
		{[]string{"--limit", "ten"}, client.EventQuery{}, true},
	}
	for _, tt := range tests {
		got, err := parseOpts(t, NewCmdWorkersEvents, cliRun{}, tt.args...)
		if tt.usage {
			wantUsage(t, err)
			continue
		}
		if err != nil || got.Query != tt.want {
			t.Errorf("%v: query %+v, %v; want %+v", tt.args, got.Query, err, tt.want)
		}
	}
}

func TestUsageFlags(t *testing.T) {
	t.Run("inflight", func(t *testing.T) {
		got, err := parseOpts(t, NewCmdUsageInflight, cliRun{}, "--worker", "wk_1", "--json")
		if err != nil || got.WorkerID != "wk_1" || !got.Exporter.JSON {
			t.Fatalf("%+v, %v", got, err)
		}
		_, err = parseOpts(t, NewCmdUsageInflight, cliRun{}, "extra")
		wantUsage(t, err)
	})
	t.Run("logs", func(t *testing.T) {
		tests := []struct {
			args  []string
			want  client.LogsQuery
			usage bool
		}{
			{nil, client.LogsQuery{Limit: 50}, false},
			{[]string{"--limit", "1000", "--offset", "10", "--worker", "wk_2"}, client.LogsQuery{Limit: 1000, Offset: 10, WorkerID: "wk_2"}, false},
			{[]string{"--limit", "0"}, client.LogsQuery{}, true},
			{[]string{"--limit", "1001"}, client.LogsQuery{}, true},
			{[]string{"--offset", "-3"}, client.LogsQuery{}, true},
			{[]string{"--jq", "]"}, client.LogsQuery{}, true},
		}
		for _, tt := range tests {
			got, err := parseOpts(t, NewCmdUsageLogs, cliRun{}, tt.args...)
			if tt.usage {
				wantUsage(t, err)
				continue
			}
			if err != nil || got.Query != tt.want {
				t.Errorf("%v: query %+v, %v; want %+v", tt.args, got.Query, err, tt.want)
			}
		}
	})
	totals := []struct {
		name  string
		build func(*Factory, func(*UsageTotalsOptions) error) *cobra.Command
		args  []string
		days  int
		sort  string
		usage bool
	}{
		{"summary default", NewCmdUsageSummary, nil, 30, "", false},
		{"summary 365", NewCmdUsageSummary, []string{"--days", "365"}, 365, "", false},
		{"summary 0", NewCmdUsageSummary, []string{"--days", "0"}, 0, "", true},
		{"summary 366", NewCmdUsageSummary, []string{"--days", "366"}, 0, "", true},
		{"summary sort", NewCmdUsageSummary, []string{"--sort", "tokens"}, 0, "", true},
		{"daily 1", NewCmdUsageDaily, []string{"--days", "1"}, 1, "", false},
		{"daily -1", NewCmdUsageDaily, []string{"--days", "-1"}, 0, "", true},
		{"breakdown default", NewCmdUsageBreakdown, nil, 30, "tokens", false},
		{"breakdown requests", NewCmdUsageBreakdown, []string{"--sort", "requests", "--days", "7"}, 7, "requests", false},
		{"breakdown cost", NewCmdUsageBreakdown, []string{"--sort", "cost"}, 0, "", true},
		{"breakdown days", NewCmdUsageBreakdown, []string{"--days", "400"}, 0, "", true},
	}
	for _, tt := range totals {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseOpts(t, tt.build, cliRun{}, tt.args...)
			if tt.usage {
				wantUsage(t, err)
				return
			}
			if err != nil || got.Days != tt.days || got.Sort != tt.sort {
				t.Fatalf("%+v, %v", got, err)
			}
		})
	}
}

func TestModelsFlags(t *testing.T) {
	got, err := parseOpts(t, NewCmdModels, cliRun{}, "--jq", ".data[].id")
	if err != nil || !got.Exporter.Enabled() {
		t.Fatalf("%+v, %v", got, err)
	}
	_, err = parseOpts(t, NewCmdModels, cliRun{}, "sim-chat")
	wantUsage(t, err)
}

func TestChatFlags(t *testing.T) {
	intp := func(n int) *int { return &n }
	floatp := func(x float64) *float64 { return &x }
	tests := []struct {
		name      string
		run       cliRun
		args      []string
		prompt    string
		system    string
		maxTokens *int
		temp      *float64
		noStream  bool
		usage     bool
	}{
		{name: "prompt", args: []string{"m", "hello"}, prompt: "hello"},
		{name: "flags", args: []string{"m", "hi", "--system", "be brief", "--max-tokens", "7", "--temperature", "0", "--no-stream"},
			prompt: "hi", system: "be brief", maxTokens: intp(7), temp: floatp(0), noStream: true},
		{name: "stdin", run: cliRun{stdin: "  from a pipe\n"}, args: []string{"m"}, prompt: "from a pipe"},
		{name: "prompt and stdin", run: cliRun{stdin: "diff --git a b\n"}, args: []string{"m", "Review:"}, prompt: "Review:\n\ndiff --git a b"},
		{name: "stdin terminal not read", run: cliRun{stdin: "ignored", stdinTTY: true}, args: []string{"m", "hi"}, prompt: "hi"},
		{name: "no prompt", args: []string{"m"}, usage: true},
		{name: "no prompt at a terminal", run: cliRun{stdinTTY: true}, args: []string{"m"}, usage: true},
		{name: "no model", usage: true},
		{name: "too many", args: []string{"m", "a", "b"}, usage: true},
		{name: "max tokens 0", args: []string{"m", "hi", "--max-tokens", "0"}, usage: true},
		{name: "temperature high", args: []string{"m", "hi", "--temperature", "2.5"}, usage: true},
		{name: "temperature negative", args: []string{"m", "hi", "--temperature=-1"}, usage: true},
		{name: "temperature NaN", args: []string{"m", "hi", "--temperature", "NaN"}, usage: true},
		{name: "bad jq", args: []string{"m", "hi", "--jq", "{"}, usage: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseOpts(t, NewCmdChat, tt.run, tt.args...)
			if tt.usage {
				wantUsage(t, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Model != "m" || got.Prompt != tt.prompt || got.System != tt.system || got.NoStream != tt.noStream {
				t.Fatalf("options %+v", got)
			}
			if (got.MaxTokens == nil) != (tt.maxTokens == nil) || (got.MaxTokens != nil && *got.MaxTokens != *tt.maxTokens) {
				t.Fatalf("max tokens %v, want %v", got.MaxTokens, tt.maxTokens)
			}
			if (got.Temperature == nil) != (tt.temp == nil) || (got.Temperature != nil && *got.Temperature != *tt.temp) {
				t.Fatalf("temperature %v, want %v", got.Temperature, tt.temp)
			}
		})
	}
}

func TestEmbedFlags(t *testing.T) {
	tests := []struct {
		run    cliRun
		args   []string
		inputs []string
		usage  bool
	}{
		{cliRun{}, []string{"e", "a", "b c"}, []string{"a", "b c"}, false},
		{cliRun{stdin: "first\n\n  \nsecond\r\n"}, []string{"e"}, []string{"first", "second"}, false},
		{cliRun{stdin: "ignored\n"}, []string{"e", "arg"}, []string{"arg"}, false},
		{cliRun{}, []string{"e"}, nil, true},
		{cliRun{stdinTTY: true}, []string{"e"}, nil, true},
		{cliRun{}, nil, nil, true},
	}
	for _, tt := range tests {
		got, err := parseOpts(t, NewCmdEmbed, tt.run, tt.args...)
		if tt.usage {
			wantUsage(t, err)
			continue
		}
		if err != nil || got.Model != "e" || !slices.Equal(got.Inputs, tt.inputs) {
			t.Errorf("%v: %+v, %v", tt.args, got, err)
		}
	}
}

func TestLoginFlags(t *testing.T) {
	got, err := parseOpts(t, NewCmdLogin, cliRun{}, "--base-url", "http://gw:8080/", "--api-key", "svc_k_x")
	if err != nil || got.BaseURL != "http://gw:8080" || got.APIKey != "svc_k_x" || got.ConfigPath != "/home/u/.config/svc/config.json" {
		t.Fatalf("%+v, %v", got, err)
	}
	got, err = parseOpts(t, NewCmdLogin, cliRun{env: map[string]string{"SVC_BASE_URL": "https://gw.example.com", "XDG_CONFIG_HOME": "/xdg"}})
	if err != nil || got.BaseURL != "https://gw.example.com" || got.APIKey != "" || got.ConfigPath != "/xdg/svc/config.json" {
		t.Fatalf("%+v, %v", got, err)
	}
	_, err = parseOpts(t, NewCmdLogin, cliRun{}, "--base-url", "ftp://gw")
	wantUsage(t, err)
	_, err = parseOpts(t, NewCmdLogin, cliRun{}, "extra")
	wantUsage(t, err)
}
