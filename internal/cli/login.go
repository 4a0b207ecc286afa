package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
)

// LoginOptions are the flags of `svc login`.
type LoginOptions struct {
	IO         *iostreams.IOStreams
	BaseURL    string
	APIKey     string // "" to read it from stdin
	ConfigPath string
	UserAgent  string
}

// NewCmdLogin builds `svc login`; runF replaces the check and the write in
// tests.
func NewCmdLogin(f *Factory, runF func(*LoginOptions) error) *cobra.Command {
	opts := &LoginOptions{IO: f.IO, UserAgent: "svc/" + f.Build.Version}
	cmd := &cobra.Command{
		Use:   "login [--base-url URL] [--api-key KEY]",
		Short: "Save an API key for the client commands",
		Long: `Check an API key against the gateway and save it, with the gateway's URL, in the
config file the client commands read: $SVC_CONFIG, else
$XDG_CONFIG_HOME/svc/config.json, else ~/.config/svc/config.json (mode 0600,
in a directory of mode 0700).

The key comes from --api-key, else stdin: typed without echo at a terminal, or
the first line of a pipe, which keeps it out of the shell's history. A key the
gateway refuses (401) is not saved. The URL comes from --base-url, else
SVC_BASE_URL, else the file, else http://127.0.0.1:8080. The saved key is
sent only to that gateway.`,
		Example: `  svc login --base-url https://gateway.example.com
  svc login < ~/.local/share/svc/admin.key
  pass show svc/key | svc login --base-url http://gpu-gw:8080`,
		GroupID: groupClient,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cc, err := f.clientConfig(cmd, true)
			if err != nil {
				return err
			}
			if cc.ConfigPath == "" {
				_, err := configPath(f.Getenv)
				return err
			}
			opts.BaseURL, opts.ConfigPath = cc.BaseURL, cc.ConfigPath
			if runF != nil {
				return runF(opts)
			}
			err = loginRun(cmd.Context(), opts)
			if client.IsStatus(err, http.StatusUnauthorized) {
				return err // about the key given, not a configured one
			}
			return f.explainAPIError(cmd, err)
		},
	}
	cmd.Flags().String("base-url", "", "the gateway's URL (env SVC_BASE_URL; default from the config file, else "+DefaultBaseURL+")")
	cmd.Flags().StringVar(&opts.APIKey, "api-key", "", "the API key (default: read from stdin)")
	return cmd
}

func loginRun(ctx context.Context, opts *LoginOptions) error {
	key := strings.TrimSpace(opts.APIKey)
	if key == "" {
		var err error
		if key, err = readKey(ctx, opts.IO, opts.BaseURL); err != nil {
			return err
		}
	}
	if key == "" {
		return usageErrorf("no API key: give --api-key or type it on stdin")
	}
	c := client.New(opts.BaseURL, key, client.WithUserAgent(opts.UserAgent))
	if _, err := c.LatestVersion(ctx); err != nil {
		switch {
		case client.IsStatus(err, http.StatusUnauthorized):
			return fmt.Errorf("%s refused the key, so it was not saved: %w", opts.BaseURL, err)
		case client.IsStatus(err, http.StatusForbidden):
			// The key is good; it just may not read workers.
			printf(opts.IO.ErrOut, "Warning: the key cannot list workers (%v); saving it anyway.\n", err)
		default:
			return err
		}
	}
	cf, err := readClientFile(opts.ConfigPath)
	if _, invalid := errors.AsType[*invalidConfigError](err); invalid {
		// Logging in is how a broken file is mended: it is written anew.
		printf(opts.IO.ErrOut, "Warning: %v; writing a new one.\n", err)
		cf, err = clientFile{}, nil
	}
	if err != nil {
		return err
	}
	cf.BaseURL, cf.APIKey = opts.BaseURL, key
	if err := writeClientFile(opts.ConfigPath, cf); err != nil {
		return err
	}
	_, err = fmt.Fprintf(opts.IO.Out, "Logged in to %s; the key is saved in %s\n", opts.BaseURL, opts.ConfigPath)
	return err
}

// readKey reads a key from stdin: without echo at a terminal, else the
// first line.
func readKey(ctx context.Context, ios *iostreams.IOStreams, baseURL string) (string, error) {
	if f, ok := ios.In.(*os.File); ok && ios.IsStdinTTY() {
		fmt.Fprintf(ios.ErrOut, "API key for %s: ", baseURL)
		key, err := readSecret(ctx, f)
		fmt.Fprintln(ios.ErrOut)
		if err != nil {
			return "", fmt.Errorf("read the key: %w", err)
		}
		return strings.TrimSpace(key), nil
	}
	line, err := readLine(ctx, ios.In)
	if err != nil {
		return "", fmt.Errorf("read the key from stdin: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// LogoutOptions are the flags of `svc logout`.
type LogoutOptions struct {
	IO         *iostreams.IOStreams
	ConfigPath string
}

// NewCmdLogout builds `svc logout`.
func NewCmdLogout(f *Factory, runF func(*LogoutOptions) error) *cobra.Command {
	opts := &LogoutOptions{IO: f.IO}
	return &cobra.Command{
		Use:   "logout",
		Short: "Remove the API key 'svc login' saved",
		Long: `Remove the API key from the config file 'svc login' writes; the gateway's URL
stays. The key itself is not revoked: 'svc admin keys revoke' does that.`,
		GroupID: groupClient,
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			path, err := configPath(f.Getenv)
			if err != nil {
				return err
			}
			opts.ConfigPath = path
			if runF != nil {
				return runF(opts)
			}
			return logoutRun(opts)
		},
	}
}

func logoutRun(opts *LogoutOptions) error {
	cf, err := readClientFile(opts.ConfigPath)
	if _, invalid := errors.AsType[*invalidConfigError](err); invalid {
		// It may hold a key, and what it says cannot be read: the whole
		// file goes.
		if err := os.Remove(opts.ConfigPath); err != nil {
			return fmt.Errorf("remove the config file: %w", err)
		}
		_, err = printf(opts.IO.Out, "Removed %s, which was not a valid config file\n", opts.ConfigPath)
		return err
	}
	if err != nil {
		return err
	}
	if cf.APIKey == "" {
		_, err := fmt.Fprintf(opts.IO.Out, "No API key is saved in %s\n", opts.ConfigPath)
		return err
	}
	cf.APIKey = ""
	if err := writeClientFile(opts.ConfigPath, cf); err != nil {
		return err
	}
	_, err = fmt.Fprintf(opts.IO.Out, "Removed the API key for %s from %s\n", dash(cf.BaseURL), opts.ConfigPath)
	return err
}
