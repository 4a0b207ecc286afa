package server

import (
	"github.com/svc-dev/svc/internal/api"
	"github.com/svc-dev/svc/internal/auth"
	"github.com/svc-dev/svc/internal/link"
	"github.com/svc-dev/svc/internal/moderation"
	"github.com/svc-dev/svc/internal/peer"
	"github.com/svc-dev/svc/internal/transcription"
)

type access int

const (
	accessPublic  access = iota // no key: health and metrics
	accessKey                   // an API key with the route's permission
	accessConsole               // the admin socket only; API keys get 403
	accessWorker                // a worker token: the worker link
	accessPeer                  // another replica: a request over its link, or the link's own upgrade
)

// route is one entry of the route table. Everything about a path that is
// not its handler (who may call it, what error shape it answers with, how it
// is counted) is declared here, once.
type route struct {
	method string
	path   string
	access access
	perm   auth.Permission
	// compatible endpoints answer errors with the error envelope beside detail.
	compatible bool
	// anthropic endpoints (the Messages API) answer errors in Anthropic's
	// envelope instead.
	anthropic bool
	// requestIDHeader endpoints send the request id in Request-Id too, as
	// Anthropic's SDKs read it: the Messages API's, and the models list
	// they share with OpenAI's.
	requestIDHeader bool
	// e2e endpoints carry content an organisation may require to be encrypted.
	e2e bool
	// codeHeader endpoints send every error's code in X-Svc-Error-Code
	// too, whatever failed: moderation's table promises it.
	codeHeader bool
	// operator endpoints need the key's user to be an owner or operator.
	operator string
	// maxBody, when set, bounds the body below the server's limit, and
	// tooLarge is the answer to a body over it, given before it is read.
	maxBody  int
	tooLarge *api.Error
	// streamed routes read their body themselves, as it arrives; the body
	// of any other route is read whole before its handler runs.
	streamed bool
	// kind is the link kind of an inference route's requests: one the
	// gateway refuses itself still gets its usage row (see recordRefusal).
	kind   string
	handle func(*call) error

	segments []string // set by newMux for paths with {params}
}

// routes is the single route table. Inference endpoints are declared once
// and served under both /api/v1 and /v1.
func (s *Server) routes() []*route {
	inference := []*route{
		{method: "POST", path: "/chat/completions", e2e: true, kind: api.KindChat, handle: s.admitted(api.KindChat, true, nil, s.chatCompletions)},
		{method: "POST", path: "/completions", e2e: true, kind: api.KindCompletion, handle: s.admitted(api.KindCompletion, true, nil, s.textCompletions)},
		{method: "POST", path: "/messages", e2e: true, anthropic: true, kind: api.KindChat, handle: s.admitted(api.KindChat, false, nil, s.messages)},
		{method: "POST", path: "/responses", e2e: true, kind: api.KindChat, handle: s.admitted(api.KindChat, false, nil, s.responsesAPI)},
		{method: "POST", path: "/embeddings", e2e: true, kind: api.KindEmbeddings, handle: s.admitted(api.KindEmbeddings, false, nil, s.embeddings)},
		{method: "POST", path: "/rerank", e2e: true, kind: api.KindRerank, handle: s.admitted(api.KindRerank, false, nil, s.rerank)},
		{method: "POST", path: "/images/generations", e2e: true, kind: api.KindImages, handle: s.admitted(api.KindImages, false, nil, s.images)},
		{method: "GET", path: "/models", requestIDHeader: true, handle: s.listModels},
		{method: "GET", path: "/models/{model...}", requestIDHeader: true, handle: s.getModel},
		{method: "POST", path: "/audio/transcriptions", e2e: true, kind: api.KindTranscription, handle: s.transcriptions,
			maxBody: transcription.MaxBody, tooLarge: transcription.ErrBodyTooLarge, streamed: true},
		{method: "GET", path: "/audio/transcriptions/live", e2e: true, kind: api.KindTranscriptionLive, handle: s.accounted(s.liveTranscription)},
		{method: "POST", path: "/audio/translations", e2e: true, kind: api.KindTranscription, handle: s.translations,
			maxBody: transcription.MaxBody, tooLarge: transcription.ErrBodyTooLarge, streamed: true},
		{method: "POST", path: "/audio/speech", e2e: true, kind: api.KindSpeech, handle: s.admitted(api.KindSpeech, false, nil, s.speech)},
		{method: "POST", path: "/moderations", e2e: true, kind: api.KindModeration, codeHeader: true, handle: s.admitted(api.KindModeration, false, moderation.ShapeError, s.moderations)},
	}
	usage := []*route{
		{method: "GET", path: "/usage/inflight", handle: s.usageInflight},
		{method: "GET", path: "/usage/logs", handle: s.usageLogs},
		{method: "GET", path: "/usage/summary", handle: s.usageSummary},
		{method: "GET", path: "/usage/daily", handle: s.usageDaily},
		{method: "GET", path: "/usage/breakdown", handle: s.usageBreakdown},
	}
	workers := []*route{
		{method: "GET", path: "/workers", handle: s.listWorkers},
		{method: "GET", path: "/workers/events", handle: s.workerEvents},
		{method: "GET", path: "/workers/latest-version", handle: s.latestVersion},
		{method: "GET", path: "/workers/{worker_id}/power", handle: s.paidOnly("Power history", validated(powerQuery, s.workerPower))},
	}
	compute := []*route{
		{method: "GET", path: "/compute/catalogue", handle: s.computeCatalogue},
		{method: "GET", path: "/compute/models", handle: s.computeModels},
		{method: "POST", path: "/compute/instances", operator: "rent GPUs", handle: s.rent},
		{method: "GET", path: "/compute/instances", handle: s.listRentals},
		{method: "GET", path: "/compute/instances/{id}", handle: s.getRental},
		{method: "DELETE", path: "/compute/instances/{id}", operator: "stop rentals", handle: s.stopRental},
		{method: "GET", path: "/compute/instances/{id}/audit", handle: s.rentalAudit},
		{method: "GET", path: "/compute/spend", handle: s.computeSpend},
	}

	out := []*route{
		// The key directory of private inference: the Pro plans' feature,
		// for keys that may send inference.
		{method: "GET", path: "/api/v1/e2e/keys", access: accessKey, perm: auth.InferenceWrite,
			handle: s.planGated("Private inference", s.e2eKeys)},
		{method: "GET", path: "/healthz", access: accessPublic, handle: s.health},
		{method: "GET", path: "/readyz", access: accessPublic, handle: s.ready},
		{method: "GET", path: "/metrics", access: accessPublic, handle: s.serveMetrics},
		{method: "GET", path: link.Path, access: accessWorker, handle: s.connectWorker},
		{method: "GET", path: peer.Path, access: accessPeer, handle: s.connectPeer},
	}
	// Anthropic's token count of a Messages request: content, so e2e as
	// Messages is, but not inference, so not accounted.
	for _, prefix := range []string{"/api/v1", "/v1"} {
		out = append(out, &route{method: "POST", path: prefix + "/messages/count_tokens", access: accessKey,
			perm: auth.InferenceWrite, compatible: true, anthropic: true, e2e: true, handle: s.countTokens})
	}
	for _, r := range inference {
		r.access, r.perm, r.compatible = accessKey, auth.InferenceWrite, true
		if r.method == "POST" {
			r.handle = s.accounted(r.handle)
		}
		alias := *r
		r.path, alias.path = "/api/v1"+r.path, "/v1"+r.path
		out = append(out, r, &alias)
	}
	add := func(perm auth.Permission, rs []*route) {
		for _, r := range rs {
			r.access, r.perm, r.path = accessKey, perm, "/api/v1"+r.path
			out = append(out, r)
		}
	}
	add(auth.UsageRead, usage)
	add(auth.WorkersRead, workers)
	add(auth.ComputeWrite, compute)
	for _, r := range s.consoleRoutes() {
		r.access, r.path = accessConsole, "/api/v1/console"+r.path
		out = append(out, r)
	}
	return out
}

func (s *Server) consoleRoutes() []*route {
	return []*route{
		{method: "GET", path: "/orgs", handle: s.listOrgs},
		{method: "POST", path: "/orgs", handle: s.createOrg},
		{method: "GET", path: "/orgs/{org}", handle: s.getOrg},
		{method: "PATCH", path: "/orgs/{org}", handle: s.updateOrg},
		{method: "POST", path: "/orgs/{org}/credit", handle: s.addCredit},
		{method: "GET", path: "/orgs/{org}/members", handle: s.listMembers},
		{method: "PUT", path: "/orgs/{org}/members/{user}", handle: s.setMember},
		{method: "DELETE", path: "/orgs/{org}/members/{user}", handle: s.removeMember},
		{method: "GET", path: "/orgs/{org}/keys", handle: s.listKeys},
		{method: "POST", path: "/orgs/{org}/keys", handle: s.createKey},
		{method: "DELETE", path: "/orgs/{org}/keys/{id}", handle: s.revokeKey},
		{method: "GET", path: "/orgs/{org}/worker-tokens", handle: s.listWorkerTokens},
		{method: "POST", path: "/orgs/{org}/worker-tokens", handle: s.createWorkerToken},
		{method: "DELETE", path: "/orgs/{org}/worker-tokens/{id}", handle: s.revokeWorkerToken},
		{method: "POST", path: "/orgs/{org}/workers/approve", handle: s.approveWorker},
		{method: "GET", path: "/users", handle: s.listUsers},
		{method: "POST", path: "/users", handle: s.createUser},
	}
}
