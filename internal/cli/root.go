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
	"sync/atomic"
	"syscall"
	"time"

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
	// Hurry is closed by a second interrupt, for a command that asked
	// for it (TakeHurry) and then cuts short what it was finishing; nil
	// where no signals are watched.
	Hurry <-chan struct{}
	// takeHurry tells the signal watch that a second interrupt is the
	// command's to act on, rather than the end of the process.
	takeHurry func()
	// traces is what the process's tracer providers share.
	traces tracesShared
}

// TakeHurry makes a second interrupt close f.Hurry for the command to cut
// its drain short (and the process end soon after, if it does not),
// rather than end the process at once. It returns f.Hurry.
func (f *Factory) TakeHurry() <-chan struct{} {
	if f.takeHurry != nil {
		f.takeHurry()
	}
	return f.Hurry
}

// NewFactory returns the factory of the running process.
func NewFactory(build buildinfo.Info) *Factory {
	return &Factory{IO: iostreams.System(os.Getenv), Build: build, Getenv: os.Getenv}
}

// Main runs the command line and returns the process exit code.
func Main(build buildinfo.Info) int {
	f := NewFactory(build)
	ctx, w := stopOnSignals(f.IO.ErrOut)
	defer w.stop()
	f.Hurry, f.takeHurry = w.hurry, w.take
	root := NewCmdRoot(f)
	// Cobra adds its completion command as it runs; added now, it is
	// checked like the other groups. It writes to the output the root has
	// when it is made, so tests that set another make their own.
	root.InitDefaultCompletionCmd()
	checkGroups(root)
	root.SetArgs(os.Args[1:])
	cmd, err := root.ExecuteContextC(ctx)
	code := reportError(f.IO.ErrOut, cmd, err)
	if w.hurried() && code == 0 {
		// Cut short by the second interrupt, as a shell reports it.
		return signalExit(os.Interrupt)
	}
	return code
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

// signalWatch is stopOnSignals' watch of the process's signals.
type signalWatch struct {
	hurry   chan struct{}
	taken   atomic.Bool // a command acts on hurry
	closed  atomic.Bool // hurry was closed
	stopped func()
}

func (w *signalWatch) take()         { w.taken.Store(true) }
func (w *signalWatch) hurried() bool { return w.closed.Load() }
func (w *signalWatch) stop()         { w.stopped() }

// hurryGrace bounds how long a command told to hurry may take before the
// process ends all the same.
const hurryGrace = 5 * time.Second

// stopOnSignals returns a context that the first of stopSignals cancels.
// A second SIGINT (Ctrl-C again) is for an operator who will not wait out
// a drain: a command that took it (Factory.TakeHurry) cuts what it was
// finishing short, as its drain timeout would, and records it (a server
// answers and writes the usage rows of what was running); any other ends
// at once. Either way the process ends with 128 plus the signal's number,
// within hurryGrace. A repeated SIGTERM or SIGHUP changes nothing, since
// process managers and scripts send those again while they wait, and
// have SIGKILL to force. The watch's stop ends it.
func stopOnSignals(errOut io.Writer) (context.Context, *signalWatch) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals(signal.Ignored)...)
	done, watched := make(chan struct{}), make(chan struct{})
	w := &signalWatch{hurry: make(chan struct{})}
	go func() {
		defer close(watched)
		var grace <-chan time.Time
		for n := 0; ; n++ {
			select {
			case <-done:
				return
			case <-grace:
				os.Exit(signalExit(os.Interrupt))
			case sig := <-sigs:
				if n == 0 {
					cancel()
					continue
				}
				if sig != os.Interrupt || w.closed.Load() {
					continue
				}
				if !w.taken.Load() {
					fmt.Fprintf(errOut, "Stopping at once on a second interrupt: what was in flight is cut off.\n")
					os.Exit(signalExit(sig))
				}
				fmt.Fprintf(errOut, "Stopping now on a second interrupt: what is running is cut off and recorded.\n")
				w.closed.Store(true)
				close(w.hurry)
				t := time.NewTimer(hurryGrace)
				defer t.Stop()
				grace = t.C
			}
		}
	}()
	w.stopped = func() {
		signal.Stop(sigs)
		close(done)
		<-watched
		cancel()
	}
	return ctx, w
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
