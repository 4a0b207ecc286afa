package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/client"
)

// NewCmdAdminKeys builds `svc admin keys`; runF replaces `keys create` in tests.
func NewCmdAdminKeys(o *AdminOptions, runF func(*KeyCreateOptions) error) *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Create, list and revoke API keys (alone: list them)", Args: groupArgs}
	list := &cobra.Command{
		Use: "list", Short: "List the organisation's API keys, revoked ones included", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				keys, err := c.ListKeys(ctx, o.Org)
				if err != nil {
					return err
				}
				if o.Exporter.Enabled() {
					return o.Exporter.Write(o.IO.Out, keys)
				}
				t := newTablePrinter(o.IO, "KEY", "NAME", "USER", "PERMISSIONS", "FILTER", "CREATED", "LAST USED", "REVOKED")
				t.shrinkable("PERMISSIONS", "NAME")
				for _, k := range keys {
					t.field(k.Prefix)
					t.field(k.Name)
					t.field(k.User)
					t.listField("permissions", permissions(k), 0)
					t.row(onOff(k.ContentFilter), t.fmtTime(k.CreatedAt), t.fmtTimePtr(k.LastUsedAt), t.fmtTimePtr(k.RevokedAt))
				}
				return t.render()
			})
		},
	}
	cmd.RunE = list.RunE
	cmd.AddCommand(
		list,
		NewCmdAdminKeysCreate(o, runF),
		&cobra.Command{
			Use: "revoke KEY", Short: "Revoke an API key by id or prefix", Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					k, err := c.RevokeKey(ctx, o.Org, args[0])
					if err != nil {
						return err
					}
					return o.printKey(k)
				})
			},
		},
	)
	return cmd
}

func describePermissions(k api.APIKey) string { return strings.Join(permissions(k), ",") }

// permissions are what a key may do, "unrestricted" for a key from before
// permissions.
func permissions(k api.APIKey) []string {
	if k.Unrestricted {
		return []string{"unrestricted"}
	}
	return k.Permissions
}

func (o *AdminOptions) printKey(k api.APIKey) error {
	if o.Exporter.Enabled() {
		return o.Exporter.Write(o.IO.Out, k)
	}
	err := fields(o.IO.Out,
		[2]string{"Key", k.Prefix},
		[2]string{"Name", k.Name},
		[2]string{"User", k.User},
		[2]string{"Permissions", describePermissions(k)},
		[2]string{"Content filter", onOff(k.ContentFilter)},
		[2]string{"Created", fmtTime(k.CreatedAt)},
		[2]string{"Last used", fmtTimePtr(k.LastUsedAt)},
		[2]string{"Revoked", fmtTimePtr(k.RevokedAt)},
	)
	if err != nil || k.Secret == "" {
		return err
	}
	_, err = printf(o.IO.Out, "\nSecret, shown only now:\n%s\n", k.Secret)
	return err
}

// KeyCreateOptions are the flags of `svc admin keys create`.
type KeyCreateOptions struct {
	*AdminOptions
	Request api.CreateKeyRequest
}

// NewCmdAdminKeysCreate builds `svc admin keys create`.
func NewCmdAdminKeysCreate(o *AdminOptions, runF func(*KeyCreateOptions) error) *cobra.Command {
	opts := &KeyCreateOptions{AdminOptions: o}
	var perms []string
	var help strings.Builder
	for _, p := range auth.Permissions() {
		fmt.Fprintf(&help, "  %-16s %s\n", p, p.Describe())
	}
	cmd := &cobra.Command{
		Use:   "create --name NAME [--user USER] [--perm PERMISSION]... [--unrestricted] [--content-filter]",
		Short: "Create an API key; its secret is shown only now",
		Long: "Create an API key for a member of the organisation. Without --perm the key gets\n" +
			"every permission except compute:write, which spends money and must be asked\n" +
			"for. Permissions:\n\n" + help.String() + "\n" +
			"--content-filter checks the key's chat requests before generation, and their\n" +
			"replies, with the organisation's moderation model (settings: moderation_model).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Request.Permissions = nil
			for _, p := range perms {
				for _, one := range strings.Split(p, ",") {
					// An empty one (--perm "" from an unset variable, or
					// a stray comma) is refused: read as none given, it
					// would make a key with the defaults.
					if one = strings.TrimSpace(one); one == "" {
						return usageErrorf("--perm %q names an empty permission; name each, or leave --perm out for the defaults", p)
					}
					opts.Request.Permissions = append(opts.Request.Permissions, one)
				}
			}
			if opts.Request.Name == "" {
				return usageErrorf("--name is required")
			}
			if runF != nil {
				return runF(opts)
			}
			return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				k, err := c.CreateKey(ctx, o.Org, opts.Request)
				if err != nil {
					return err
				}
				return o.printKey(k)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.Request.Name, "name", "", "what the key is for (required)")
	fl.StringVar(&opts.Request.User, "user", "admin", "the member the key belongs to")
	fl.StringArrayVar(&perms, "perm", nil, "permission to grant; repeat or separate with commas")
	fl.BoolVar(&opts.Request.Unrestricted, "unrestricted", false, "grant everything, now and in future (legacy keys)")
	fl.BoolVar(&opts.Request.ContentFilter, "content-filter", false, "check the key's chat prompts and replies with the moderation model")
	cmd.MarkFlagsMutuallyExclusive("perm", "unrestricted")
	return cmd
}
