// Package cli is svc's command tree. Commands are built by constructors from
// a Factory; nothing is held in package state.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/buildinfo"
	"github.com/svc-dev/svc/internal/iostreams"
)

// Factory carries what commands need from the process: streams, build
// information and the environment. Tests build one with fakes.
type Factory struct {
	IO     *iostreams.IOStreams
	Build  buildinfo.Info
	Getenv func(string) string
}

// NewFactory returns the factory of the running process.
func NewFactory(build buildinfo.Info) *Factory {
	return &Factory{IO: iostreams.System(os.Getenv), Build: build, Getenv: os.Getenv}
}

// Main runs the command line and returns the process exit code.
func Main(build buildinfo.Info) int {
	f := NewFactory(build)
	ctx, stop := stopOnSignals(f.IO.ErrOut)
	defer stop()
	root := NewCmdRoot(f)
	// Cobra adds its completion command as it runs; added now, it is
	// checked like the other groups. It writes to the output the root has
	// when it is made, so tests that set another make their own.
	root.InitDefaultCompletionCmd()
	checkGroups(root)
	root.SetArgs(os.Args[1:])
	cmd, err := root.ExecuteContextC(ctx)
	return reportError(f.IO.ErrOut, cmd, err)
}

// stopSignals end a command gracefully: SIGHUP too, which a closed
// terminal sends, so that a server started from one drains rather than
// dies with its requests and the usage rows not yet written; unless it
// was started ignoring SIGHUP (nohup), which watching it would undo.
// ignored says whether the process started ignoring a signal
// (signal.Ignored).
func stopSignals(ignored func(os.Signal) bool) []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// stopOnSignals returns a context that the first of stopSignals cancels.
// A second SIGINT (Ctrl-C again) ends the process at once, with 128 plus
// its number, for an operator who will not wait out a drain; a repeated
// SIGTERM or SIGHUP changes nothing, since process managers and scripts
// send those again while they wait, and have SIGKILL to force. stop ends
// the watch.
func stopOnSignals(errOut io.Writer) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals(signal.Ignored)...)
	done, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if n == 0 {
					cancel()
					continue
				}
				if sig != os.Interrupt {
					continue
				}
				fmt.Fprintf(errOut, "Stopping at once on a second interrupt: what was in flight is cut off.\n")
				os.Exit(signalExit(sig))
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		<-watched
		cancel()
	}
}

// Command groups of the root's help.
const (
	groupServer = "server"
	groupClient = "client"
)

// NewCmdRoot builds the whole command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "svc",
		Short: "Inference gateway and GPU fleet manager",
		Long: `svc is an OpenAI-compatible inference gateway in front of an organisation's GPU
workers, and the tools to run it.

'svc serve' runs the gateway and 'svc worker' the agent on each GPU box.
Everything else is a client of a running gateway: 'svc admin' manages
organisations, users, keys and settings through the server's admin socket;
'svc workers', 'svc models', 'svc usage', 'svc chat', 'svc embed',
'svc transcribe' and 'svc speak' call its public API with an API key
('svc login' saves one); 'svc catalogue', 'svc rent', 'svc rentals',
'svc stop' and 'svc spend' rent GPUs that join the fleet as workers.`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		DisableAutoGenTag: true,
		Version:           f.Build.Version,
	}
	root.SetVersionTemplate(versionLine(f.Build) + "\n")
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	root.SetIn(f.IO.In)
	root.SetFlagErrorFunc(flagError)

	root.AddGroup(
		&cobra.Group{ID: groupServer, Title: "Running svc:"},
		&cobra.Group{ID: groupClient, Title: "Using a gateway:"},
	)
	serve, worker, sim, admin, clusterCmd := NewCmdServe(f, nil), NewCmdWorker(f, nil), NewCmdSim(f), NewCmdAdmin(f), NewCmdCluster(f)
	for _, c := range []*cobra.Command{serve, worker, sim, admin, clusterCmd} {
		c.GroupID = groupServer
	}
	root.AddCommand(
		serve, worker, sim, admin, clusterCmd,
		NewCmdTop(f),
		NewCmdWorkers(f, nil),
		NewCmdModels(f, nil),
		NewCmdUsage(f),
		NewCmdCatalogue(f, nil),
		NewCmdRent(f, nil),
		NewCmdRentals(f, nil),
		NewCmdStop(f, nil),
		NewCmdSpend(f, nil),
		NewCmdChat(f, nil),
		NewCmdEmbed(f, nil),
		NewCmdTranscribe(f, nil),
		NewCmdSpeak(f, nil),
		NewCmdModerate(f, nil),
		NewCmdLogin(f, nil),
		NewCmdLogout(f, nil),
		NewCmdVersion(f),
		NewCmdMan(f),
	)
	checkGroups(root)
	return root
}

// checkGroups makes each command that only groups others refuse an
// argument naming none of them with a usage error, as cobra does for the
// root alone; run without one, it runs its list or show subcommand where
// it has one, and otherwise prints its help.
func checkGroups(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		checkGroups(sub)
	}
	if !cmd.HasParent() || !cmd.HasSubCommands() || cmd.Runnable() {
		return
	}
	cmd.Args = groupArgs
	var def *cobra.Command
	for _, sub := range cmd.Commands() {
		if (sub.Name() == "list" || sub.Name() == "show") && sub.RunE != nil && sub.Args != nil && sub.Args(sub, nil) == nil {
			def = sub
			break
		}
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if def != nil {
			return def.RunE(c, args)
		}
		return c.Help()
	}
}

// flagError is a usage error for a flag that did not parse. A negative
// number read as flags (credit add -5) says how to give it instead.
func flagError(cmd *cobra.Command, err error) error {
	msg := err.Error()
	if i := strings.LastIndex(msg, " in -"); i >= 0 && strings.HasPrefix(msg, "unknown shorthand flag") {
		if arg := msg[i+len(" in "):]; negativeNumber.MatchString(arg) {
			return usageErrorf("%v: a negative number is an argument; give it after --, as in `%s -- %s`", err, cmd.CommandPath(), arg)
		}
	}
	return usageError(err)
}

var negativeNumber = regexp.MustCompile(`^-[0-9]*\.?[0-9]+$`)
