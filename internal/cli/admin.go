package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/iostreams"
	"github.com/svc-dev/svc/internal/money"
	"github.com/svc-dev/svc/internal/server"
)

// AdminOptions are the flags every `svc admin` command shares.
type AdminOptions struct {
	IO      *iostreams.IOStreams
	DataDir string
	Socket  string
	Org     string
	// Exporter is --json and --jq, for every admin command.
	Exporter Exporter

	getenv func(string) string
}

// Client connects to the admin socket: --socket, else <data>/admin.sock.
func (o *AdminOptions) Client() (*client.Client, error) {
	sock := o.Socket
	if sock == "" {
		dir, err := resolveDataDir(o.DataDir, o.getenv)
		if err != nil {
			return nil, err
		}
		sock = filepath.Join(dir, server.SocketFile)
	}
	return client.NewSocket(sock, client.WithUserAgent("svc-admin")), nil
}

// NewCmdAdmin builds `svc admin`.
func NewCmdAdmin(f *Factory) *cobra.Command {
	opts := &AdminOptions{IO: f.IO, getenv: f.Getenv}
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Manage organisations, users, keys and settings (console)",
		Long: `Console operations. They reach the running server through the admin socket in
its data directory (mode 0600), so they work only on the server's host and for
the user it runs as; API keys cannot perform them.

Commands act on the organisation named by --org (default "default").`,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.Exporter.Prepare(); err != nil {
				return err
			}
			if err := applyEnv(cmd, f.Getenv, envFlag{"data", "SVC_DATA"}, envFlag{"socket", "SVC_ADMIN_SOCKET"}, envFlag{"org", "SVC_ORG"}); err != nil {
				return err
			}
			if strings.TrimSpace(opts.Org) == "" {
				// Most likely an unset variable: the server would answer
				// for a path without its organisation.
				return usageErrorf("--org is empty; name an organisation, or leave --org out for %q", "default")
			}
			return nil
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&opts.DataDir, "data", "", dataFlagHelp)
	pf.StringVar(&opts.Socket, "socket", "", "admin socket path (env SVC_ADMIN_SOCKET; default <data>/admin.sock)")
	pf.StringVar(&opts.Org, "org", "default", "organisation to act on (env SVC_ORG)")
	opts.Exporter.AddFlags(cmd, true)

	cmd.AddCommand(
		newCmdAdminOrgs(opts),
		newCmdAdminPlan(opts),
		newCmdAdminCredit(opts),
		newCmdAdminCard(opts),
		newCmdAdminBudget(opts),
		NewCmdAdminSettings(opts, nil),
		newCmdAdminUsers(opts),
		newCmdAdminMembers(opts),
		NewCmdAdminKeys(opts, nil),
		newCmdAdminWorkerTokens(opts),
		newCmdAdminWorkers(opts),
	)
	return cmd
}

// withClient runs fn with a console client and the command's context.
func (o *AdminOptions) withClient(cmd *cobra.Command, fn func(context.Context, *client.Client) error) error {
	c, err := o.Client()
	if err != nil {
		return err
	}
	err = fn(cmd.Context(), c)
	var ce *client.ConnectError
	var se *client.StallError
	switch {
	case errors.As(err, &ce) && errors.Is(err, fs.ErrPermission):
		// The socket is there, and refuses this user: the server's runs.
		return withHint(err, "The admin socket admits only the user svc serve runs as (and root): run this as that user, e.g. with sudo -u.")
	case errors.As(err, &ce):
		return withHint(err, "Is svc serve running on this host with the same --data (or SVC_DATA)?")
	case errors.As(err, &se):
		return withHint(err, "svc serve took the call and did not answer: its log may say why.")
	}
	return err
}

// printOrg prints an organisation as JSON or as labelled lines.
func (o *AdminOptions) printOrg(org api.Organization) error {
	if o.Exporter.Enabled() {
		return o.Exporter.Write(o.IO.Out, org)
	}
	s := org.Settings
	budget, floor, runtime := "none", "none", "none"
	if s.MonthlyBudgetGBP != nil {
		budget = "£" + s.MonthlyBudgetGBP.String()
	}
	if s.JurisdictionFloor != nil {
		floor = *s.JurisdictionFloor
	}
	if s.MaxRuntimeSeconds != nil {
		runtime = (time.Duration(*s.MaxRuntimeSeconds) * time.Second).String()
	}
	card := "no"
	if s.PaymentCardOnFile {
		card = "yes"
	}
	return fields(o.IO.Out,
		[2]string{"Organisation", org.Name},
		[2]string{"ID", org.ID},
		[2]string{"Plan", string(org.Plan)},
		[2]string{"Require E2E", onOff(s.RequireE2E)},
		[2]string{"Content filtering", onOff(s.ContentFiltering)},
		[2]string{"Moderation model", cmp.Or(s.ModerationModel, api.DefaultModerationModel+" (default)")},
		[2]string{"Remote image URLs", onOff(s.AllowRemoteImageURLs)},
		[2]string{"Jurisdiction floor", floor},
		[2]string{"Card on file", card},
		[2]string{"Credit", "£" + s.CreditBalanceGBP.String()},
		[2]string{"Monthly budget", budget},
		[2]string{"Max rental runtime", runtime},
		[2]string{"Worker approval", onOff(s.RequireWorkerApproval)},
		[2]string{"Home region", cmp.Or(s.HomeRegion, "none")},
		[2]string{"Requests a minute", requestsPerMinute(org)},
		[2]string{"Created", fmtTime(org.CreatedAt)},
	)
}

// requestsPerMinute is the organisation's request rate limit as settings
// show prints it, saying when it is the plan's rather than its own.
func requestsPerMinute(org api.Organization) string {
	limit := "unlimited"
	if n := org.RequestsPerMinute(); n > 0 {
		limit = strconv.Itoa(n)
	}
	if org.Settings.RequestsPerMinute == nil {
		limit += " (" + string(org.Plan) + " plan default)"
	}
	return limit
}

func newCmdAdminOrgs(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "orgs", Short: "List, create and show organisations (alone: list them)", Args: groupArgs}
	list := &cobra.Command{
		Use: "list", Short: "List organisations", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				orgs, err := c.ListOrgs(ctx)
				if err != nil {
					return err
				}
				if o.Exporter.Enabled() {
					return o.Exporter.Write(o.IO.Out, orgs)
				}
				t := newTablePrinter(o.IO, "NAME", "PLAN", "CREDIT", "E2E", "CREATED")
				for _, org := range orgs {
					t.row(org.Name, string(org.Plan), "£"+org.Settings.CreditBalanceGBP.String(), onOff(org.Settings.RequireE2E), t.fmtTime(org.CreatedAt))
				}
				return t.render()
			})
		},
	}
	var plan string
	create := &cobra.Command{
		Use: "create NAME", Short: "Create an organisation", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				org, err := c.CreateOrg(ctx, api.CreateOrgRequest{Name: args[0], Plan: api.Plan(plan)})
				if err != nil {
					return err
				}
				return o.printOrg(org)
			})
		},
	}
	create.Flags().StringVar(&plan, "plan", "free", "free, pro or enterprise")
	show := &cobra.Command{
		Use: "show [NAME]", Short: "Show an organisation (default --org)", Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := o.Org
			if len(args) == 1 {
				name = args[0]
			}
			return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				org, err := c.Org(ctx, name)
				if err != nil {
					return err
				}
				return o.printOrg(org)
			})
		},
	}
	cmd.RunE = list.RunE
	cmd.AddCommand(list, create, show)
	return cmd
}

// patchOrg applies p to --org and prints the result.
func (o *AdminOptions) patchOrg(cmd *cobra.Command, p api.OrgPatch) error {
	return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
		org, err := c.UpdateOrg(ctx, o.Org, p)
		if err != nil {
			return err
		}
		return o.printOrg(org)
	})
}

func newCmdAdminPlan(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "plan", Short: "Set the organisation's plan"}
	cmd.AddCommand(&cobra.Command{
		Use: "set PLAN", Short: "Set the plan: free, pro or enterprise", Args: exactArgs(1),
		ValidArgs: []string{"free", "pro", "enterprise"},
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.patchOrg(cmd, api.OrgPatch{Plan: api.Some(api.Plan(args[0]))})
		},
	})
	return cmd
}

func newCmdAdminCredit(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "credit", Short: "Adjust the organisation's credit balance"}
	cmd.AddCommand(&cobra.Command{
		Use:   "add AMOUNT",
		Short: "Add credit in GBP (negative to take away), e.g. 25 or 12.50",
		Example: `  svc admin credit add 25
  svc admin credit add --org acme 12.50
  svc admin credit add -- -5      # takes £5 away: a negative amount goes after --`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			amount, err := money.Parse(args[0])
			if err != nil {
				return usageErrorf("invalid amount %q: %v", args[0], err)
			}
			return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				org, err := c.AddCredit(ctx, o.Org, amount)
				if err != nil {
					return err
				}
				return o.printOrg(org)
			})
		},
	})
	return cmd
}

func newCmdAdminCard(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "card", Short: "Record whether a payment card is on file"}
	cmd.AddCommand(
		&cobra.Command{
			Use: "set", Short: "Record that a payment card is on file", Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.patchOrg(cmd, api.OrgPatch{PaymentCardOnFile: api.Some(true)})
			},
		},
		&cobra.Command{
			Use: "remove", Short: "Record that no payment card is on file", Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.patchOrg(cmd, api.OrgPatch{PaymentCardOnFile: api.Some(false)})
			},
		},
	)
	return cmd
}

func newCmdAdminBudget(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "budget", Short: "Set or clear the monthly rental budget"}
	cmd.AddCommand(
		&cobra.Command{
			Use: "set AMOUNT", Short: "Cap rental spend per calendar month, in GBP", Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				amount, err := money.Parse(args[0])
				if err != nil {
					return usageErrorf("invalid amount %q: %v", args[0], err)
				}
				return o.patchOrg(cmd, api.OrgPatch{MonthlyBudgetGBP: api.Some(amount)})
			},
		},
		&cobra.Command{
			Use: "clear", Short: "Remove the monthly budget cap", Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.patchOrg(cmd, api.OrgPatch{MonthlyBudgetGBP: api.Null[money.GBP]()})
			},
		},
	)
	return cmd
}

func newCmdAdminUsers(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "users", Short: "List and create users"}
	cmd.AddCommand(
		&cobra.Command{
			Use: "list", Short: "List users", Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					users, err := c.ListUsers(ctx)
					if err != nil {
						return err
					}
					if o.Exporter.Enabled() {
						return o.Exporter.Write(o.IO.Out, users)
					}
					t := newTablePrinter(o.IO, "NAME", "ID", "CREATED")
					short := abbrevFor(users, func(u api.User) string { return u.ID })
					for _, u := range users {
						t.row(u.Name, short.of(u.ID), t.fmtTime(u.CreatedAt))
					}
					return t.render()
				})
			},
		},
		&cobra.Command{
			Use: "create NAME", Short: "Create a user; give them a role with 'svc admin members set'", Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					u, err := c.CreateUser(ctx, args[0])
					if err != nil {
						return err
					}
					if o.Exporter.Enabled() {
						return o.Exporter.Write(o.IO.Out, u)
					}
					_, err = printf(o.IO.Out, "Created user %s (%s)\n", u.Name, u.ID)
					return err
				})
			},
		},
	)
	return cmd
}

func newCmdAdminMembers(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "members", Short: "Manage users' roles in the organisation"}
	cmd.AddCommand(
		&cobra.Command{
			Use: "list", Short: "List the organisation's members", Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					ms, err := c.Members(ctx, o.Org)
					if err != nil {
						return err
					}
					if o.Exporter.Enabled() {
						return o.Exporter.Write(o.IO.Out, ms)
					}
					t := newTablePrinter(o.IO, "USER", "ROLE", "ADDED")
					for _, m := range ms {
						t.row(m.User, m.Role, t.fmtTime(m.AddedAt))
					}
					return t.render()
				})
			},
		},
		&cobra.Command{
			Use: "set USER ROLE", Short: "Give USER the role owner, operator or member", Args: exactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					m, err := c.SetMember(ctx, o.Org, args[0], args[1])
					if err != nil {
						return err
					}
					if o.Exporter.Enabled() {
						return o.Exporter.Write(o.IO.Out, m)
					}
					_, err = printf(o.IO.Out, "%s is now %s of %s\n", m.User, m.Role, o.Org)
					return err
				})
			},
		},
		&cobra.Command{
			Use: "remove USER", Short: "Remove USER from the organisation and revoke their keys in it", Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					if err := c.RemoveMember(ctx, o.Org, args[0]); err != nil {
						return err
					}
					if o.Exporter.Enabled() {
						return o.Exporter.Write(o.IO.Out, map[string]any{"org": o.Org, "user": args[0], "removed": true})
					}
					_, err := fmt.Fprintf(o.IO.Out, "Removed %s from %s; their keys there are revoked\n", args[0], o.Org)
					return err
				})
			},
		},
	)
	return cmd
}

func newCmdAdminWorkers(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "workers", Short: "Approve workers when the organisation requires approval"}
	cmd.AddCommand(&cobra.Command{
		Use:   "approve NAME|ID",
		Short: "Approve a worker, so that it serves while require_worker_approval is on",
		Long: `Approve a worker of the organisation. With require_worker_approval on, a
worker the organisation has not approved before is listed with
approval_pending and is routed nothing until it is approved. The approval is
kept: the worker is not asked again when it reconnects or the gateway
restarts. A name no worker has connected with yet is approved ahead of its
first connection.`,
		Example: `  svc admin workers approve gpu-box-3
  svc admin workers approve wk_32dec6d960564e50 --org acme`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				a, err := c.ApproveWorker(ctx, o.Org, args[0])
				if err != nil {
					return err
				}
				if o.Exporter.Enabled() {
					return o.Exporter.Write(o.IO.Out, a)
				}
				state := "not connected yet"
				if a.Connected {
					state = "connected; it serves now"
				}
				_, err = printf(o.IO.Out, "Approved worker %s (%s) in %s on %s by %s: %s.\n",
					a.WorkerName, a.WorkerID, o.Org, fmtTime(a.ApprovedAt), a.By, state)
				return err
			})
		},
	})
	return cmd
}

func newCmdAdminWorkerTokens(o *AdminOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "worker-tokens", Aliases: []string{"tokens"}, Short: "Manage the tokens worker agents connect with"}
	printToken := func(t api.WorkerToken) error {
		if o.Exporter.Enabled() {
			return o.Exporter.Write(o.IO.Out, t)
		}
		return fields(o.IO.Out,
			[2]string{"Token", t.Prefix},
			[2]string{"Name", t.Name},
			[2]string{"Created", fmtTime(t.CreatedAt)},
			[2]string{"Last used", fmtTimePtr(t.LastUsedAt)},
			[2]string{"Revoked", fmtTimePtr(t.RevokedAt)},
		)
	}
	cmd.AddCommand(
		&cobra.Command{
			Use: "list", Short: "List worker tokens", Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					ts, err := c.ListWorkerTokens(ctx, o.Org)
					if err != nil {
						return err
					}
					if o.Exporter.Enabled() {
						return o.Exporter.Write(o.IO.Out, ts)
					}
					t := newTablePrinter(o.IO, "TOKEN", "NAME", "CREATED", "LAST USED", "REVOKED")
					for _, tok := range ts {
						t.row(tok.Prefix, tok.Name, t.fmtTime(tok.CreatedAt), t.fmtTimePtr(tok.LastUsedAt), t.fmtTimePtr(tok.RevokedAt))
					}
					return t.render()
				})
			},
		},
		&cobra.Command{
			Use: "create NAME", Short: "Create a worker token; its secret is shown only now", Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					t, err := c.CreateWorkerToken(ctx, o.Org, args[0])
					if err != nil {
						return err
					}
					if o.Exporter.Enabled() {
						return o.Exporter.Write(o.IO.Out, t)
					}
					_, err = printf(o.IO.Out, "Created worker token %s (%s) in %s.\nSecret, shown only now:\n%s\n", t.Prefix, t.Name, o.Org, t.Secret)
					return err
				})
			},
		},
		&cobra.Command{
			Use: "revoke TOKEN", Short: "Revoke a worker token by id or prefix", Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					t, err := c.RevokeWorkerToken(ctx, o.Org, args[0])
					if err != nil {
						return err
					}
					return printToken(t)
				})
			},
		},
	)
	return cmd
}
