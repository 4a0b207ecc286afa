// Package lambda places rentals' machines on Lambda Cloud (Lambda, Inc.,
// domiciled in the US), through its public HTTP API v1.
//
// Lambda suits the gateway's model of a provider:
//
//   - Its API is public and documented (an OpenAPI description, with a
//     stable error envelope whose codes clients may branch on).
//   - A launch takes cloud-init user data (plain text, up to 1 MB), so a
//     machine runs the rental's boot script at first boot; nothing has to
//     reach the machine over SSH, though Lambda still requires one SSH key
//     on every launch.
//   - GET /instance-types lists every type with its price and the regions
//     with capacity for it now, so offers are live.
//   - Prices are per instance-hour, in US cents, and billing runs from
//     launch until terminate (by the minute).
//   - Terminate takes instance ids, and GET /instances/{id} says when a
//     machine is terminated or gone, which is how Destroy confirms.
//
// Machines are named "svc-" and the rental id, which is how List maps
// Lambda's machines back to rentals after a restart.
//
// Lambda rate-limits the API to about a request a second and launches to
// about one every 12 seconds; requests answered 429 are retried after the
// wait asked for, within the caller's context.
package lambda
