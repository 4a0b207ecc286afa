package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/client"
	"github.com/svc-dev/svc/internal/money"
)

// settingKeys documents what `svc admin settings set` accepts.
const settingKeys = `  require_e2e=BOOL                refuse unencrypted inference requests (403 e2e_required)
  content_filtering=BOOL          content filtering for every key of the organisation
  moderation_model=MODEL|default  checks filtered keys' chats and moderations naming none (guard-b:0.6b)
  allow_remote_image_urls=BOOL    let image inputs name https URLs, not only data: URLs
  jurisdiction_floor=TIER|none    lowest rental jurisdiction tier accepted
  max_runtime=DURATION|none       stop rentals automatically after this long, e.g. 8h
  monthly_budget_gbp=AMOUNT|none  cap rental spend per calendar month
  payment_card_on_file=BOOL       record whether billing holds a card
  plan=free|pro|enterprise        the organisation's plan
  require_worker_approval=BOOL    new workers serve nothing until approved (svc admin workers approve)
  home_region=REGION|none         on a cluster, the region (svc serve --region) whose replicas home the organisation
  requests_per_minute=N|default   inference requests a minute; 0 or unlimited: no limit; default: the plan's (free 600, paid unlimited)`

// NewCmdAdminSettings builds `svc admin settings`; runF replaces `settings set` in tests.
func NewCmdAdminSettings(o *AdminOptions, runF func(*SettingsSetOptions) error) *cobra.Command {
	cmd := &cobra.Command{Use: "settings", Short: "Show and change the organisation's settings"}
	cmd.AddCommand(
		&cobra.Command{
			Use: "show", Short: "Show the organisation's plan and settings", Args: noArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return o.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					org, err := c.Org(ctx, o.Org)
					if err != nil {
						return err
					}
					return o.printOrg(org)
				})
			},
		},
		NewCmdAdminSettingsSet(o, runF),
	)
	return cmd
}

// SettingsSetOptions are the arguments of `svc admin settings set`.
type SettingsSetOptions struct {
	*AdminOptions
	Patch api.OrgPatch
}

// NewCmdAdminSettingsSet builds `svc admin settings set KEY=VALUE...`.
func NewCmdAdminSettingsSet(o *AdminOptions, runF func(*SettingsSetOptions) error) *cobra.Command {
	opts := &SettingsSetOptions{AdminOptions: o}
	return &cobra.Command{
		Use:   "set KEY=VALUE...",
		Short: "Change settings",
		Long:  "Change one or more settings of the organisation. Keys:\n\n" + settingKeys,
		Example: `  svc admin settings set require_e2e=true max_runtime=8h
  svc admin settings set monthly_budget_gbp=none --org acme
  svc admin settings set requests_per_minute=1200 --org acme`,
		Args: minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := parseSettings(args)
			if err != nil {
				return err
			}
			opts.Patch = p
			if runF != nil {
				return runF(opts)
			}
			return o.patchOrg(cmd, p)
		},
	}
}

// parseSettings turns KEY=VALUE arguments into a partial update.
func parseSettings(args []string) (api.OrgPatch, error) {
	var p api.OrgPatch
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			return p, usageErrorf("%q is not KEY=VALUE; keys:\n%s", a, settingKeys)
		}
		k = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(k)), "-", "_")
		v = strings.TrimSpace(v)
		var err error
		switch k {
		case "require_e2e":
			p.RequireE2E, err = parseBool(v)
		case "content_filtering":
			p.ContentFiltering, err = parseBool(v)
		case "moderation_model":
			p.ModerationModel = api.Some(v)
			if isNone(v) || v == "default" {
				p.ModerationModel = api.Null[string]()
			}
		case "home_region":
			p.HomeRegion = api.Some(v)
			if isNone(v) {
				p.HomeRegion = api.Null[string]()
			}
		case "require_worker_approval", "worker_approval":
			p.RequireWorkerApproval, err = parseBool(v)
		case "allow_remote_image_urls":
			p.AllowRemoteImageURLs, err = parseBool(v)
		case "payment_card_on_file":
			p.PaymentCardOnFile, err = parseBool(v)
		case "plan":
			p.Plan = api.Some(api.Plan(v))
		case "jurisdiction_floor":
			p.JurisdictionFloor = api.Some(v)
			if isNone(v) {
				p.JurisdictionFloor = api.Null[string]()
			}
		case "monthly_budget_gbp", "monthly_budget", "budget":
			if isNone(v) {
				p.MonthlyBudgetGBP = api.Null[money.GBP]()
				break
			}
			var m money.GBP
			if m, err = money.Parse(v); err == nil {
				p.MonthlyBudgetGBP = api.Some(m)
			}
		case "max_runtime", "max_runtime_seconds":
			if isNone(v) {
				p.MaxRuntimeSeconds = api.Null[int64]()
				break
			}
			var d time.Duration
			if d, err = parseDuration(v); err == nil {
				p.MaxRuntimeSeconds = api.Some(int64(d / time.Second))
			}
		case "requests_per_minute", "rpm":
			p.RequestsPerMinute, err = parseRequestsPerMinute(v)
		default:
			return p, usageErrorf("unknown setting %q; keys:\n%s", k, settingKeys)
		}
		if err != nil {
			return p, usageErrorf("invalid %s=%q: %v", k, v, err)
		}
	}
	return p, nil
}

// parseRequestsPerMinute takes a count, unlimited (0) or default (null).
// The none and off of the other settings are refused: here they could
// mean either no limit or no setting of the organisation's own, which on
// the Free plan is a limit.
func parseRequestsPerMinute(v string) (api.Optional[int], error) {
	switch strings.ToLower(v) {
	case "default", "null":
		return api.Null[int](), nil
	case "unlimited":
		return api.Some(0), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return api.Optional[int]{}, fmt.Errorf("want a number of requests, 0 or unlimited for no limit, or default for the plan's")
	}
	return api.Some(n), nil
}

func isNone(v string) bool {
	switch strings.ToLower(v) {
	case "none", "null", "off", "":
		return true
	}
	return false
}

func parseBool(v string) (api.Optional[bool], error) {
	switch strings.ToLower(v) {
	case "on", "yes", "y":
		return api.Some(true), nil
	case "off", "no", "n":
		return api.Some(false), nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return api.Optional[bool]{}, fmt.Errorf("want true or false")
	}
	return api.Some(b), nil
}

// parseDuration takes a Go duration (8h, 90m) or plain seconds.
func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 8h or 90m")
	}
	return d, nil
}
