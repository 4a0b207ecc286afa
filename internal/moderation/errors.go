package moderation

import (
	"errors"
	"net/http"
	"time"

	"github.com/svc-dev/svc/internal/api"
)

// RowMessage is the usage row's error message for a check that failed
// with ae: its message, but for a verdict that was neither safe nor
// unsafe, whose message quotes the guard's answer to the client, and a
// guard that goes off script often repeats what it was given: the usage
// log records verdicts, never the content checked.
func RowMessage(ae *api.Error) string {
	if ae.Code == api.CodeModerationInvalidVerdict {
		return invalidVerdictRow
	}
	return ae.Message
}

const invalidVerdictRow = "The moderation model replied with neither safe nor unsafe (its reply is not recorded)"

// ShapeError answers a moderation check's failure with the moderation
// table's row for it: a model no online (or up-to-date) worker has is a
// conflict, moderation_unavailable, which retrying will not cure; so is a
// worker that cannot run the check at all (501) or has no memory for the
// model (507), lasting conditions the table's retryable 503 would have
// clients retry in vain; busy workers are moderation_capacity; a worker
// that otherwise failed or timed out is moderation_unavailable too, but
// worth a retry; a verdict that is neither safe nor unsafe keeps its own
// code. An input too long for the model is a 413 to shorten it. A
// worker's own 429 is busy too; any other of its refusals that
// names no code is a check this model cannot run, a retry no cure. Every
// code also goes in X-Svc-Error-Code.
func ShapeError(err error) error {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return err
	}
	out := *ae
	out.CodeHeader = true
	// A row that changes the kind sends the kind's type, not the one the
	// failure came with.
	switch {
	case ae.Code == api.CodeModerationInvalidVerdict, ae.Code == api.CodeModerationUnavailable, ae.Kind == api.KindClientGone,
		ae.Code == api.CodeRemoteImageUnavailable, ae.Code == api.CodeRemoteImageRefused, ae.Code == api.CodeRemoteImageURLNotAllowed:
		// The worker's own verdict on the check or its images, with the
		// status docs/moderation.md gives it: a failed image fetch is a
		// 502 to fix the URL for, not a check to retry.
		return &out
	case ae.Code == contextLengthExceeded || ae.Type == contextLengthExceeded:
		// The input, not the check, is at fault: the spec's 413 for an
		// input over the model's limit, as embeddings and reranking
		// answer it, whatever status the engine gave it.
		long := api.Relayed(http.StatusRequestEntityTooLarge, contextLengthExceeded, contextLengthExceeded,
			"The input is longer than the moderation model's context window allows; shorten or split it: "+ae.Message)
		long.CodeHeader, long.Param = true, "input"
		return long
	case ae.Kind == api.KindCapacity:
		out.Code = api.CodeModerationCapacity
	case ae.Kind == api.KindRelayed && ae.HTTPStatus() == http.StatusTooManyRequests:
		out.Kind, out.Type, out.Code = api.KindCapacity, "", api.CodeModerationCapacity
		if out.RetryAfter == 0 {
			out.RetryAfter = time.Second
		}
	case ae.Code == api.CodeModelNotFound, ae.Code == api.CodeNoWorkerOnline, ae.Code == api.CodeNoWorkerForModel,
		ae.Code == api.CodeApprovalPending, ae.Code == api.CodeModelIncomplete, ae.Code == api.CodeWorkerOffline:
		// None of the workers online can run it until the organisation
		// acts: installs the model, connects or approves a worker (the
		// one X-Svc-Worker-Id names, when that one is offline). No check
		// ran: the table's 503 is for a check that failed.
		lasting(&out, "No online worker can run this moderation model now: ")
	case ae.HTTPStatus() == http.StatusNotImplemented:
		lasting(&out, "The worker cannot run this moderation check, and retrying will not help "+
			"until another worker or model can: ")
	case ae.HTTPStatus() == http.StatusInsufficientStorage:
		lasting(&out, "The moderation model does not fit the worker's memory, and retrying will not help "+
			"until a worker with room for it is online, memory is freed on the worker, or a smaller model is used: ")
	case ae.Kind == api.KindRelayed && ae.Code == "" && ae.HTTPStatus() < http.StatusInternalServerError:
		lasting(&out, "The worker could not run this moderation check: ")
	case ae.ServerFault():
		out.Kind, out.Type, out.Code = api.KindUnavailable, "", api.CodeModerationUnavailable
		out.Message = "The moderation check failed on the worker; retry: " + ae.Message
		if ae.Code == api.CodeWorkersUnhealthy {
			// Refused before any worker ran it: its workers are held back.
			out.Message = "No worker can run the moderation check now; retry: " + ae.Message
		}
		if out.RetryAfter == 0 {
			out.RetryAfter = time.Second
		}
	default:
		return &out
	}
	if out.Param == "" {
		out.Param = "model"
	}
	return &out
}

// lasting makes out, a copy of a failure, the table's 409
// moderation_unavailable for a condition a retry will not change: its
// message is why, then the failure's own.
func lasting(out *api.Error, why string) {
	out.Kind, out.Type, out.Code, out.RetryAfter = api.KindConflict, "", api.CodeModerationUnavailable, 0
	out.Message = why + out.Message
}

// contextLengthExceeded is the type and code of an input longer than the
// model's context window, as the engines' adapters report it.
const contextLengthExceeded = "context_length_exceeded"
