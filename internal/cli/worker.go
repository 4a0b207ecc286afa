package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/engine"
	"github.com/svc-dev/svc/internal/engine/espeak"
	"github.com/svc-dev/svc/internal/engine/moonshine"
	"github.com/svc-dev/svc/internal/engine/ollama"
	"github.com/svc-dev/svc/internal/engine/openai"
	"github.com/svc-dev/svc/internal/engine/sim"
	"github.com/svc-dev/svc/internal/power"
	"github.com/svc-dev/svc/internal/server"
	"github.com/svc-dev/svc/internal/web"
	"github.com/svc-dev/svc/internal/worker"
)

// WorkerOptions are the flags of `svc worker`.
type WorkerOptions struct {
	Gateway       string
	Token         string
	TokenFile     string
	Name          string
	MaxConcurrent int
	Engines       []string
	ModelMeta     string
	Aliases       []string
	Features      []string
	Power         string // auto, sensors, sim or off
	PowerBaseline float64
	PowerRoot     string
	PowerNVML     string
	PowerInterval time.Duration
	PowerWindow   time.Duration
	E2E           bool
	E2EKey        string
	Pull          []string
	AlwaysOn      []string
	DrainTimeout  time.Duration
	EngineTTFB    time.Duration
	LogLevel      string
	LogFormat     string
	PprofAddr     string
	OTLPEndpoint  string
	WebTools      bool
	WebSearch     string
	WebAllowHosts []string
	WebMaxSteps   int
}

// NewCmdWorker builds `svc worker`; runF replaces the agent in tests.
func NewCmdWorker(f *Factory, runF func(context.Context, *WorkerOptions) error) *cobra.Command {
	opts := &WorkerOptions{}
	cmd := &cobra.Command{
		Use:   "worker --engine KIND[=ARG]...",
		Short: "Run the worker agent on a GPU box",
		Long: `Run the worker agent: it dials out to the gateway (no inbound port), serves the
models of its local inference engines, and reconnects by itself after a drop,
resuming the requests in flight.

Engines (repeat --engine for several):
  sim[=OPTIONS]      the built-in simulator, e.g. sim or sim=tps=200,ttft=20ms
  openai=URL         an OpenAI-compatible server: vLLM, llama-server, SGLang,
                     audio servers (whisper.cpp's whisper-server,
                     speaches, Kokoro), rerankers (/v1/rerank) and image
                     servers (/v1/images/generations); an API key for it
                     can be given in SVC_OPENAI_API_KEY
  ollama=URL         Ollama, e.g. ollama=http://127.0.0.1:11434
  espeak-ng[=PATH]   text to speech with espeak-ng (model espeak-ng)
  moonshine=DIR      English speech to text with Moonshine on the CPU, as
                     installed in DIR by engines/moonshine/install.sh
                     (model moonshine-base; ,size=tiny for moonshine-tiny)

--model-alias ID=LOCAL offers an engine's model under the id clients use,
e.g. stt-large-v3-turbo=moonshine-base.

Web tools (--web-tools): chat requests that bring no tools of their own, with
tool_choice unset or auto, are offered web_fetch, and web_search with
--web-search searxng=URL. The worker runs the calls itself, up to
--web-max-steps, and feeds the results back until the model answers; replies
list the calls in svc.web_tool_steps. web_fetch never reaches loopback,
private or link-local addresses (--web-allow-host exempts one, for tests).
Encrypted requests are never offered web tools.

The worker token comes from --token or --token-file (not both), else
SVC_WORKER_TOKEN, else SVC_WORKER_TOKEN_FILE, else, on the gateway's own
host, the gateway's <data>/worker.token. A token given with --token is in
the process list for every local user to read; prefer the file or the
environment.

SIGINT, SIGTERM or SIGHUP (unless started under nohup) makes the worker take
nothing new, finish what it runs (up to --drain-timeout), and exit. A second
SIGINT stops it at once.`,
		Example: `  svc worker --gateway http://gateway:8080 --token-file /etc/svc/worker.token --engine openai=http://127.0.0.1:8000
  svc worker --engine ollama=http://127.0.0.1:11434 --pull llama3.2 --max-concurrent 4`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fls := cmd.Flags()
			if fls.Changed("token") && fls.Changed("token-file") {
				return usageErrorf("give --token or --token-file, not both")
			}
			pairs := []envFlag{{"gateway", "SVC_GATEWAY"}, {"name", "SVC_WORKER_NAME"},
				{"max-concurrent", "SVC_MAX_CONCURRENT"}, {"engine", "SVC_ENGINE"},
				{"log-level", "SVC_LOG_LEVEL"}, {"log-format", "SVC_LOG_FORMAT"}}
			if !fls.Changed("token-file") {
				// A token file named on the command line beats a token
				// in the environment, as a flag beats its variable: a
				// stale SVC_WORKER_TOKEN must not outrank a rotated file.
				pairs = append(pairs, envFlag{"token", "SVC_WORKER_TOKEN"}, envFlag{"token-file", "SVC_WORKER_TOKEN_FILE"})
			}
			if err := applyEnv(cmd, f.Getenv, pairs...); err != nil {
				return err
			}
			if len(opts.Engines) == 0 {
				return usageErrorf("give at least one --engine (sim, openai=URL, ollama=URL, espeak-ng or moonshine=DIR)")
			}
			if opts.MaxConcurrent < 1 {
				return usageErrorf("--max-concurrent must be at least 1")
			}
			if opts.EngineTTFB <= 0 {
				return usageErrorf("--engine-ttfb must be above 0")
			}
			if opts.DrainTimeout < 0 {
				return usageErrorf("--drain-timeout may not be negative, got %s", opts.DrainTimeout)
			}
			if !opts.WebTools && (opts.WebSearch != "" || len(opts.WebAllowHosts) > 0) {
				return usageErrorf("--web-search and --web-allow-host need --web-tools")
			}
			if opts.WebMaxSteps < 1 {
				return usageErrorf("--web-max-steps must be at least 1")
			}
			if !slices.Contains([]string{"auto", "sensors", "sim", "off"}, opts.Power) {
				return usageErrorf("--power must be auto, sensors, sim or off, got %q", opts.Power)
			}
			if runF != nil {
				return runF(cmd.Context(), opts)
			}
			return runWorker(cmd.Context(), f, opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Gateway, "gateway", "http://127.0.0.1:8080", "the gateway's base URL (env SVC_GATEWAY)")
	fl.StringVar(&opts.Token, "token", "", "worker token (env SVC_WORKER_TOKEN)")
	fl.StringVar(&opts.TokenFile, "token-file", "", "file holding the worker token (env SVC_WORKER_TOKEN_FILE)")
	fl.StringVar(&opts.Name, "name", "", "worker name, unique in the organisation (env SVC_WORKER_NAME; default the host name)")
	fl.IntVar(&opts.MaxConcurrent, "max-concurrent", 1, "requests run at once (env SVC_MAX_CONCURRENT)")
	fl.StringArrayVar(&opts.Engines, "engine", nil, "an inference engine: sim[=OPTIONS], openai=URL, ollama=URL, espeak-ng[=PATH] or moonshine=DIR; repeatable (env SVC_ENGINE: one engine, which the flags add to)")
	fl.StringVar(&opts.ModelMeta, "model-meta", "", `JSON file of per-model metadata overriding what engines report: {"model-id": {"capabilities": [...], "context_window": N, "sampling_defaults": {...}, "default_thinking": true, "voices": [...], "default_voice": "..."}}`)
	fl.StringArrayVar(&opts.Aliases, "model-alias", nil, "offer an engine's model under another id, ID=LOCAL (e.g. stt-large-v3-turbo=whisper-large-v3-turbo); repeatable")
	fl.StringArrayVar(&opts.Pull, "pull", nil, "install a model at start (engines that can, e.g. ollama), waiting up to 5 minutes for an engine that does not listen yet; repeatable")
	fl.StringArrayVar(&opts.AlwaysOn, "always-on", nil, "keep a model loaded, by the id the worker offers it under (an ollama name without a tag means :latest): loaded as soon as an engine offers it (once --pull installed it), never unloaded for idleness, and loaded again if the engine drops it (engines that load models on demand, e.g. ollama); repeatable")
	fl.DurationVar(&opts.DrainTimeout, "drain-timeout", 5*time.Minute, "how long running requests may take to finish on shutdown")
	fl.DurationVar(&opts.EngineTTFB, "engine-ttfb", worker.DefaultEngineTTFB, "how long an engine may send nothing before it is probed, and how long the probe may take: a request is moved to another worker after both, and two in a row stall the engine; an answer that pauses as long is cut off after both, or after five times as long")
	fl.StringVar(&opts.LogLevel, "log-level", "info", "debug, info, warn or error (env SVC_LOG_LEVEL)")
	fl.StringVar(&opts.LogFormat, "log-format", "auto", "text, json, or auto (env SVC_LOG_FORMAT)")
	fl.StringVar(&opts.Power, "power", "auto", "power readings: auto (the machine's sensors; the simulated profile when every engine is sim), sensors, sim, or off")
	fl.Float64Var(&opts.PowerBaseline, "power-baseline", power.DefaultBaselineW, "watts added to the GPUs and CPU when no whole-machine sensor measures the system")
	// Recorded sensors and short windows, for end-to-end tests.
	fl.StringVar(&opts.PowerRoot, "power-root", "/", "filesystem root whose sys/ holds the power sensors")
	fl.StringVar(&opts.PowerNVML, "power-nvml", "", "a recorded NVML (JSON) in place of libnvidia-ml")
	fl.DurationVar(&opts.PowerInterval, "power-interval", power.DefaultInterval, "how often power is sampled")
	fl.DurationVar(&opts.PowerWindow, "power-window", power.DefaultWindow, "how long a power window is")
	fl.BoolVar(&opts.E2E, "e2e", true, "serve end-to-end encrypted requests: make a key pair at start and announce its public key")
	fl.StringVar(&opts.E2EKey, "e2e-key", "", "keep the private-inference key pair in this file (mode 0600) so it outlives restarts; in memory when empty")
	fl.BoolVar(&opts.WebTools, "web-tools", false, "run web tools for models: chat requests that bring no tools of their own are offered web_fetch (and web_search with --web-search), which the worker runs itself")
	fl.StringVar(&opts.WebSearch, "web-search", "", "the search backend of web_search, KIND=URL: searxng=URL (a SearXNG instance with its JSON format enabled)")
	fl.StringArrayVar(&opts.WebAllowHosts, "web-allow-host", nil, "for tests and development: let web_fetch reach this IP:PORT although it is loopback, private or link-local (all such addresses are refused otherwise); repeatable")
	fl.IntVar(&opts.WebMaxSteps, "web-max-steps", web.DefaultMaxSteps, "web tool calls a request may make; the model must then answer")
	for _, name := range []string{"power-root", "power-nvml", "power-interval", "power-window"} {
		_ = fl.MarkHidden(name)
	}
	addPprofFlag(cmd, &opts.PprofAddr)
	addOTLPFlag(cmd, &opts.OTLPEndpoint)
	// A worker announcing fewer features stands in for an older release,
	// to try a mixed fleet.
	fl.StringSliceVar(&opts.Features, "protocol-features", []string{api.FeatureModeration, api.FeatureLiveTranscription}, "protocol features to announce")
	_ = fl.MarkHidden("protocol-features")
	return cmd
}

func runWorker(ctx context.Context, f *Factory, opts *WorkerOptions) error {
	log, err := newLogger(f.IO.ErrOut, f.IO.IsStderrTTY(), opts.LogLevel, opts.LogFormat)
	if err != nil {
		return err
	}
	stopPprof, err := servePprof(ctx, opts.PprofAddr, log)
	if err != nil {
		return err
	}
	defer stopPprof()
	defer paceHeap(ctx, f)()
	tracer, stopTracing, err := startTracing(ctx, f, opts.OTLPEndpoint, "svc-worker", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	token, err := workerToken(opts, f.Getenv)
	if err != nil {
		return err
	}
	if opts.Token != "" && opts.Token != f.Getenv("SVC_WORKER_TOKEN") {
		log.Warn("--token puts the worker token in the process list, where every local user can read it; use --token-file or SVC_WORKER_TOKEN")
	}
	if opts.Token == "" && opts.TokenFile != "" {
		// Said, not refused: a container's mounted secret is often 0644
		// in a filesystem only it sees.
		if fi, err := os.Stat(opts.TokenFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("the worker token file may be read by other users of this host; chmod 600 it", "path", opts.TokenFile,
				"mode", fi.Mode().Perm().String())
		}
	}
	name := opts.Name
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return fmt.Errorf("worker name: %w; give --name", err)
		}
	}
	engines, err := parseEngines(opts.Engines, f.Getenv, log)
	if err != nil {
		return err
	}
	for _, m := range opts.Pull {
		if !api.ValidModelID(m) {
			return usageErrorf("--pull %q: a model id is at most %d bytes, without control characters", m, api.MaxModelID)
		}
	}
	for _, m := range opts.AlwaysOn {
		if !api.ValidModelID(m) {
			return usageErrorf("--always-on %q: a model id is at most %d bytes, without control characters", m, api.MaxModelID)
		}
	}
	cfg := worker.Config{
		Gateway: opts.Gateway, Token: token, Name: name, MaxConcurrent: opts.MaxConcurrent,
		Version: f.Build.Version, Engines: engines, Pull: opts.Pull, AlwaysOn: opts.AlwaysOn, DrainTimeout: opts.DrainTimeout, Hurry: f.TakeHurry(), Logger: log,
		EngineTTFB: opts.EngineTTFB, Tracer: tracer,
	}
	if opts.ModelMeta != "" {
		if cfg.ModelMeta, err = worker.LoadModelMeta(opts.ModelMeta); err != nil {
			return err
		}
	}
	if cfg.Aliases, err = parseAliases(opts.Aliases); err != nil {
		return err
	}
	// An empty list is a release without features, not the defaults.
	cfg.Features = append([]string{}, opts.Features...)
	if cfg.Power, cfg.SimulatedPower, err = powerConfig(opts, engines); err != nil {
		return err
	}
	switch {
	case opts.E2E && opts.E2EKey != "":
		if cfg.E2E, err = e2ee.LoadOrCreateKeyPair(opts.E2EKey); err != nil {
			return usageErrorf("--e2e-key: %v", err)
		}
	case opts.E2E:
		if cfg.E2E, err = e2ee.GenerateKeyPair(); err != nil {
			return fmt.Errorf("private inference key: %w", err)
		}
	}
	if cfg.E2E != nil {
		// What clients pin a worker's key by, so as not to trust the
		// gateway's key directory.
		pub := cfg.E2E.Public()
		log.Info("private inference on", "key_id", pub.KeyID, "fingerprint", e2ee.Fingerprint(pub.PublicKey))
	}
	if opts.WebTools {
		if cfg.Web, err = webLoop(opts, log); err != nil {
			return usageError(err)
		}
		log.Info("web tools on", "search", opts.WebSearch != "", "allow", opts.WebAllowHosts, "max_steps", opts.WebMaxSteps)
	}
	agent, err := worker.New(cfg)
	if err != nil {
		return usageError(err)
	}
	log.Info("worker starting", "name", name, "gateway", redactURL(opts.Gateway), "engines", redactEngines(opts.Engines), "version", f.Build.Version)
	if err := agent.Run(ctx); err != nil {
		return err // reported on exit
	}
	log.Info("worker stopped")
	return nil
}

// webLoop builds the web tools the flags ask for.
func webLoop(opts *WorkerOptions, log *slog.Logger) (*web.Loop, error) {
	tools := &web.Tools{Fetcher: &web.Fetcher{}}
	for _, h := range opts.WebAllowHosts {
		ap, err := netip.ParseAddrPort(h)
		if err != nil {
			return nil, fmt.Errorf("--web-allow-host %q: want IP:PORT, e.g. 127.0.0.1:8000", h)
		}
		tools.Fetcher.Guard.Allow = append(tools.Fetcher.Guard.Allow, ap)
	}
	if opts.WebSearch != "" {
		var err error
		if tools.Searcher, err = web.NewSearcher(opts.WebSearch); err != nil {
			return nil, fmt.Errorf("--web-search: %w", err)
		}
	}
	return &web.Loop{Tools: tools, MaxSteps: opts.WebMaxSteps, Logger: log}, nil
}

// workerToken reads the token from the flag, its file, or the local
// gateway's data directory.
func workerToken(opts *WorkerOptions, getenv func(string) string) (string, error) {
	if opts.Token != "" {
		return opts.Token, nil
	}
	path := opts.TokenFile
	if path == "" {
		dir, err := resolveDataDir(getenv("SVC_DATA"), getenv)
		if err != nil {
			return "", usageErrorf("no worker token: give --token, SVC_WORKER_TOKEN or --token-file")
		}
		path = filepath.Join(dir, server.WorkerTokenFile)
		if _, err := os.Stat(path); err != nil {
			return "", usageErrorf("no worker token: give --token, SVC_WORKER_TOKEN or --token-file (create one with `svc admin worker-tokens create NAME`)")
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		// As permanent as an empty file: the command's, not the moment's.
		return "", usageErrorf("read worker token: %v", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", usageErrorf("worker token file %s is empty", path)
	}
	return t, nil
}

// powerConfig is what --power asks for: the machine's sensors, or the
// simulated profile (by default when the simulator is the only engine, so
// a demo has graphs).
func powerConfig(opts *WorkerOptions, engines []engine.Engine) (*power.Config, bool, error) {
	if opts.Power == "off" {
		return nil, false, nil
	}
	pc := &power.Config{Root: opts.PowerRoot, BaselineW: opts.PowerBaseline, Interval: opts.PowerInterval, Window: opts.PowerWindow}
	if opts.PowerNVML != "" {
		nvml, err := power.LoadNVMLRecording(opts.PowerNVML)
		if err != nil {
			return nil, false, usageErrorf("--power-nvml: %v", err)
		}
		pc.NVML = nvml
	}
	simulated := opts.Power == "sim"
	if opts.Power == "auto" {
		simulated = !slices.ContainsFunc(engines, func(e engine.Engine) bool { return e.Kind() != "sim" })
	}
	return pc, simulated, nil
}

// parseAliases reads --model-alias ID=LOCAL pairs.
func parseAliases(specs []string) (map[string]string, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(specs))
	for _, spec := range specs {
		id, local, ok := strings.Cut(spec, "=")
		id, local = strings.TrimSpace(id), strings.TrimSpace(local)
		if !ok || id == "" || local == "" {
			return nil, usageErrorf("--model-alias %q: want ID=LOCAL, e.g. stt-large-v3=whisper-large-v3", spec)
		}
		if _, dup := out[id]; dup {
			return nil, usageErrorf("--model-alias: %s is given twice", id)
		}
		if !api.ValidModelID(id) {
			return nil, usageErrorf("--model-alias %q: the id clients use must be at most %d bytes, without control characters", spec, api.MaxModelID)
		}
		out[id] = local
	}
	return out, nil
}

// newMoonshine builds the moonshine engine from DIR[,size=tiny][,threads=N].
func newMoonshine(arg string, log *slog.Logger) (engine.Engine, error) {
	dir, opts, _ := strings.Cut(arg, ",")
	if dir == "" {
		return nil, errors.New("needs the install directory: moonshine=DIR (engines/moonshine/install.sh DIR)")
	}
	cfg := moonshine.Config{Dir: dir, Logger: log}
	for opt := range strings.SplitSeq(opts, ",") {
		if opt == "" {
			continue
		}
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "size":
			cfg.Size = v
		case "threads":
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, fmt.Errorf("threads=%q is not a number", v)
			}
			cfg.Threads = n
		default:
			return nil, fmt.Errorf("unknown option %q (want size or threads)", k)
		}
	}
	return moonshine.New(cfg)
}

// parseEngines builds the engines named by --engine specs.
func parseEngines(specs []string, getenv func(string) string, log *slog.Logger) ([]engine.Engine, error) {
	var out []engine.Engine
	for _, spec := range specs {
		kind, arg, _ := strings.Cut(strings.TrimSpace(spec), "=")
		var e engine.Engine
		var err error
		switch kind {
		case "sim":
			var cfg sim.Config
			if cfg, err = sim.ParseOptions(arg); err == nil {
				e = sim.New(cfg)
			}
		case "openai":
			if arg == "" {
				return nil, usageErrorf("--engine openai needs a URL: openai=http://host:port")
			}
			e, err = openai.New(openai.Config{BaseURL: arg, APIKey: getenv("SVC_OPENAI_API_KEY")})
		case "ollama":
			if arg == "" {
				arg = "http://127.0.0.1:11434"
			}
			e, err = ollama.New(ollama.Config{BaseURL: arg})
		case espeak.Kind, "espeak":
			e = espeak.New(espeak.Config{Path: arg})
		case moonshine.Kind:
			e, err = newMoonshine(arg, log)
		default:
			return nil, usageErrorf("unknown engine %q: use sim, openai=URL, ollama=URL, espeak-ng[=PATH] or moonshine=DIR", spec)
		}
		if err != nil {
			return nil, usageErrorf("--engine %s: %v", spec, err)
		}
		out = append(out, e)
	}
	return out, nil
}
