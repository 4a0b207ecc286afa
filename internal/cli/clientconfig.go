package cli

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/netguard"
	"github.com/svc-dev/svc/internal/server"
)

// DefaultBaseURL is the gateway client commands call when nothing says
// otherwise: `svc serve` on its default address.
const DefaultBaseURL = "http://127.0.0.1:8080"

// clientHelp explains, in every client command's help, where the gateway's
// address and the API key come from.
const clientHelp = `The gateway's address comes from --base-url, else SVC_BASE_URL, else the
file 'svc login' writes, else http://127.0.0.1:8080. The API key comes from
--api-key, else SVC_API_KEY, else that file (only for the gateway it was saved
for). The file is $SVC_CONFIG, else $XDG_CONFIG_HOME/svc/config.json, else
~/.config/svc/config.json.

When no key is configured and the gateway is on this host (a loopback
address), the local gateway's admin key is used if it is readable:
<data>/admin.key, with the data directory from SVC_DATA, else
$XDG_DATA_HOME/svc or ~/.local/share/svc, as 'svc serve' uses.`

// AddClientFlags adds --base-url and --api-key, as persistent flags, to a
// command that calls the gateway's public API (a group's flags reach its
// subcommands). Factory.APIClient reads them.
func AddClientFlags(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.String("base-url", "", "the gateway's URL (env SVC_BASE_URL; default from 'svc login', else "+DefaultBaseURL+")")
	pf.String("api-key", "", "API key (env SVC_API_KEY; default the key saved by 'svc login', else the local gateway's admin key)")
}

// ClientConfig is where client commands send requests and with which key.
type ClientConfig struct {
	BaseURL string
	APIKey  string
	// KeySource names where APIKey came from, for messages: "--api-key",
	// "SVC_API_KEY", or a file's path; "" when there is no key.
	KeySource string
	// ConfigPath is the config file consulted (it may not exist).
	ConfigPath string
	// SavedFor is the gateway the config file's key was saved for, when
	// the file holds a key that was not used because it is for another.
	SavedFor string
}

// ClientConfig resolves the gateway's URL and the API key: each from cmd's
// flag, else its environment variable, else the config file, else the
// default URL and the local gateway's admin key. cmd may be nil, or lack the
// flags (AddClientFlags): then the environment and the file decide.
func (f *Factory) ClientConfig(cmd *cobra.Command) (ClientConfig, error) {
	return f.clientConfig(cmd, false)
}

// clientConfig is ClientConfig, taking a file that is not a config file
// for none when mending is set: 'svc login' writes it anew.
func (f *Factory) clientConfig(cmd *cobra.Command, mending bool) (ClientConfig, error) {
	var cc ClientConfig
	flag := func(name string) (string, bool) {
		if cmd == nil {
			return "", false
		}
		fl := cmd.Flags().Lookup(name)
		if fl == nil || !fl.Changed {
			return "", false
		}
		return fl.Value.String(), true
	}
	path, pathErr := configPath(f.Getenv)
	cc.ConfigPath = path
	_, urlGiven := flag("base-url")
	_, keyGiven := flag("api-key")
	urlGiven = urlGiven || f.Getenv("SVC_BASE_URL") != ""
	keyGiven = keyGiven || strings.TrimSpace(f.Getenv("SVC_API_KEY")) != ""
	// The file is read only when it is needed: one that cannot be read
	// stops no command given what it would have said.
	var file clientFile
	if pathErr == nil && !(urlGiven && keyGiven) {
		var err error
		file, err = readClientFile(path)
		if _, invalid := errors.AsType[*invalidConfigError](err); invalid && mending {
			file, err = clientFile{}, nil
		}
		if err != nil {
			return cc, withHint(err, "Fix or remove the file; 'svc login' writes a new one.")
		}
	}

	switch v, ok := flag("base-url"); {
	case ok:
		cc.BaseURL = v
	case f.Getenv("SVC_BASE_URL") != "":
		cc.BaseURL = f.Getenv("SVC_BASE_URL")
	case file.BaseURL != "":
		cc.BaseURL = file.BaseURL
	default:
		cc.BaseURL = DefaultBaseURL
	}
	base, err := normalizeBaseURL(cc.BaseURL)
	if err != nil {
		return cc, err
	}
	cc.BaseURL = base

	if v, ok := flag("api-key"); ok {
		cc.APIKey, cc.KeySource = strings.TrimSpace(v), "--api-key"
		return cc, nil
	}
	if v := strings.TrimSpace(f.Getenv("SVC_API_KEY")); v != "" {
		cc.APIKey, cc.KeySource = v, "SVC_API_KEY"
		return cc, nil
	}
	if file.APIKey != "" {
		// A saved key goes only to the gateway it was saved for, so that
		// --base-url pointed elsewhere cannot leak it.
		if saved, err := normalizeBaseURL(file.BaseURL); file.BaseURL == "" || (err == nil && saved == cc.BaseURL) {
			cc.APIKey, cc.KeySource = file.APIKey, path
			return cc, nil
		}
		cc.SavedFor = file.BaseURL
	}
	if isLoopback(cc.BaseURL) {
		if dir, err := resolveDataDir(f.Getenv("SVC_DATA"), f.Getenv); err == nil {
			keyPath := filepath.Join(dir, server.AdminKeyFile)
			if b, err := os.ReadFile(keyPath); err == nil && len(strings.TrimSpace(string(b))) > 0 {
				cc.APIKey, cc.KeySource = strings.TrimSpace(string(b)), keyPath
			}
		}
	}
	return cc, nil
}

// APIClient returns a client of the gateway's public API configured as
// ClientConfig resolves it. It is built on demand, so commands that never
// call the gateway never read the config file.
func (f *Factory) APIClient(cmd *cobra.Command) (*client.Client, error) {
	cc, err := f.ClientConfig(cmd)
	if err != nil {
		return nil, err
	}
	return f.newClient(cc), nil
}

// newClient is a client of the gateway cc names, with cc's key.
func (f *Factory) newClient(cc ClientConfig, opts ...client.Option) *client.Client {
	return client.New(cc.BaseURL, cc.APIKey, append([]client.Option{client.WithUserAgent("svc/" + f.Build.Version)}, opts...)...)
}

// e2eFlags are --e2e and --e2e-pin, of the commands that can seal their
// request to a worker's key.
type e2eFlags struct {
	on   bool
	pins []string
}

// addE2EFlags adds them to cmd; what says what only the worker sees.
func addE2EFlags(cmd *cobra.Command, what string) *e2eFlags {
	e := &e2eFlags{}
	cmd.Flags().BoolVar(&e.on, "e2e", false, "encrypt end to end: seal the request to a worker's key, so only that worker "+what+" (docs/e2e.md)")
	cmd.Flags().StringSliceVar(&e.pins, "e2e-pin", nil,
		"seal only to the worker keys of these SHA-256 fingerprints (repeat, or separate with commas), which the worker logs at start, rather than to any key the gateway lists; implies --e2e")
	return e
}

// clientFunc is f's client of cmd's gateway: with --e2e, one whose
// inference requests are sealed to a worker's key, and the replies
// opened, by the e2ee transport under the client; with pins, only to the
// keys they name. A pin that is not a fingerprint is a usage error.
func (e *e2eFlags) clientFunc(f *Factory, cmd *cobra.Command) (func() (*client.Client, error), error) {
	pinning := cmd.Flags().Changed("e2e-pin")
	if pinning && len(e.pins) == 0 {
		// An empty value (a variable not set) pins nothing: sealing to
		// any key, or sending in the clear, is not what was asked.
		return nil, usageErrorf("--e2e-pin: no fingerprint given")
	}
	if !e.on && !pinning {
		return f.apiClientFunc(cmd), nil
	}
	for _, p := range e.pins {
		if !isFingerprint(p) {
			return nil, usageErrorf("--e2e-pin %q: a fingerprint is the 64 hexadecimal digits of a key's SHA-256, as 'svc worker' logs it", p)
		}
	}
	var keys e2ee.KeySource = e2ee.Directory{}
	if len(e.pins) > 0 {
		keys = e2ee.Pinned(keys, e.pins...)
	}
	return func() (*client.Client, error) {
		cc, err := f.ClientConfig(cmd)
		if err != nil {
			return nil, err
		}
		t := e2ee.NewTransport(http.DefaultTransport, keys)
		return f.newClient(cc, client.WithHTTPClient(&http.Client{Transport: t})), nil
	}, nil
}

// isFingerprint reports whether s is a key's fingerprint: 64 hexadecimal
// digits, either case.
func isFingerprint(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// apiClientFunc defers APIClient until a command's run needs it.
func (f *Factory) apiClientFunc(cmd *cobra.Command) func() (*client.Client, error) {
	return func() (*client.Client, error) { return f.APIClient(cmd) }
}

// explainAPIError adds advice to the errors a user can do something about:
// a gateway that cannot be reached, and a key it refuses.
func (f *Factory) explainAPIError(cmd *cobra.Command, err error) error {
	var ce *client.ConnectError
	var se *client.StallError
	switch {
	case err == nil:
		return nil
	// The sealing transport's failures come through the HTTP client as if
	// the gateway could not be reached; they are something else.
	case errors.Is(err, e2ee.ErrNoKey):
		return withHint(errors.New("no worker of this organisation serves that model with end-to-end encryption"),
			"Workers announce a key unless started with --e2e=false, and with --e2e-pin only a key of a pinned fingerprint counts; 'svc workers' lists what is connected.")
	case errors.Is(err, e2ee.ErrInvalidReply), errors.Is(err, e2ee.ErrTruncated):
		return errors.New("the encrypted reply did not verify (changed or cut short on its way) and was refused")
	case errors.As(err, &ce):
		return withHint(err, "Is the gateway running? Start one with 'svc serve', or point at yours with --base-url or SVC_BASE_URL.")
	case errors.As(err, &se):
		return withHint(err, "Is --base-url (or SVC_BASE_URL) the gateway's address, and is it, or a proxy in front of it, up and answering?")
	case client.IsStatus(err, 401):
		cc, cerr := f.ClientConfig(cmd)
		switch {
		case cerr != nil:
			return err
		case cc.APIKey == "" && cc.SavedFor != "":
			return withHint(err, fmt.Sprintf("No API key for %s: the key in %s was saved for %s. Give one with --api-key or SVC_API_KEY, or run 'svc login'.", cc.BaseURL, cc.ConfigPath, cc.SavedFor))
		case cc.APIKey == "":
			return withHint(err, "No API key is configured: give one with --api-key or SVC_API_KEY, or run 'svc login'.")
		default:
			return withHint(err, fmt.Sprintf("The key came from %s; give another with --api-key or SVC_API_KEY, or run 'svc login'.", cc.KeySource))
		}
	}
	return err
}

// normalizeBaseURL checks u is an http(s) URL and drops a trailing slash.
func normalizeBaseURL(u string) (string, error) {
	p, err := url.Parse(strings.TrimSpace(u))
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || strings.HasSuffix(p.Host, ":") || !validPort(p.Port()) {
		return "", usageErrorf("invalid gateway URL %q: want http://HOST:PORT or https://HOST", u)
	}
	// The OpenAI SDKs' base URL is the gateway's with /v1, and the demo
	// shows both: either names the gateway here.
	return strings.TrimSuffix(strings.TrimRight(p.String(), "/"), "/v1"), nil
}

func validPort(port string) bool {
	if port == "" {
		return true
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// isLoopback reports whether the URL names this host.
func isLoopback(u string) bool {
	p, err := url.Parse(u)
	return err == nil && netguard.LoopbackHost(p.Hostname())
}

// clientFile is the config file `svc login` writes.
type clientFile struct {
	BaseURL string `json:"base_url,omitempty"`
	APIKey  string `json:"api_key,omitempty"`
}

// configPath is $SVC_CONFIG, else $XDG_CONFIG_HOME/svc/config.json, else
// ~/.config/svc/config.json.
func configPath(getenv func(string) string) (string, error) {
	if p := getenv("SVC_CONFIG"); p != "" {
		return filepath.Abs(p)
	}
	if d := getenv("XDG_CONFIG_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "svc", "config.json"), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "svc", "config.json"), nil
	}
	return "", errors.New("cannot find a config directory: set SVC_CONFIG, XDG_CONFIG_HOME or HOME")
}

// readClientFile reads the config file; a missing one is empty.
// invalidConfigError is a config file that was read but is not one:
// 'svc login' and 'svc logout' replace it.
type invalidConfigError struct{ msg string }

func (e *invalidConfigError) Error() string { return e.msg }

func readClientFile(path string) (clientFile, error) {
	var cf clientFile
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cf, nil
	}
	if err != nil {
		return cf, fmt.Errorf("read config: %w", err)
	}
	if err := json.Unmarshal(b, &cf); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return cf, &invalidConfigError{fmt.Sprintf("config file %s: %s must be a %s, not a JSON %s", path, te.Field, te.Type, te.Value)}
		}
		return cf, &invalidConfigError{fmt.Sprintf("config file %s is not valid JSON: %v", path, err)}
	}
	return cf, nil
}

// writeClientFile replaces the config file atomically, readable only by
// its owner because it holds a key.
func writeClientFile(path string, cf clientFile) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create config directory: %w", err)
	}
	b, err := json.MarshalIndent(cf, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write config: %w", err)
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("write config: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}
