package api

import "net/http"

// Kind is what went wrong, in the terms a client acts on. Domain packages
// name the kind of their failures and never a status: Kind's table below
// is the one place an HTTP status is chosen, so that the same failure is
// answered the same way wherever it is found, and a usage row records the
// status the client saw.
//
// Error kinds are not request kinds (KindChat, KindSpeech, ...), which are
// strings naming what a request asks for.
type Kind uint8

const (
	// KindInternal is the zero Kind: a failure that names no kind is the
	// service's own, which the client can only retry.
	KindInternal           Kind = iota
	KindInvalidRequest          // the request is malformed or asks for what cannot be done
	KindValidation              // fields failed validation; Fields lists them
	KindUnauthenticated         // no key, or one that is not valid
	KindPaymentRequired         // no card on file, not enough credit, or the budget is spent
	KindForbidden               // the key, its role or the organisation may not do this
	KindPlanRequired            // the feature is not on the organisation's plan
	KindNotFound                // no such route, model, worker or object
	KindMethodNotAllowed        // the route exists, not with this method
	KindConflict                // the state of things does not allow it now
	KindTooLarge                // the body or a file in it is over its limit
	KindHeadersTooLarge         // the request's headers are over their limit
	KindRateLimited             // the caller asked too often
	KindCapacity                // every worker serving the model is busy; QueueDepth says how busy
	KindClientGone              // the client closed the connection first
	KindNotImplemented          // the worker or service cannot do this at all
	KindUpstream                // no usable answer came from the worker
	KindUnavailable             // nothing can serve the request now; retrying later may
	KindTimeout                 // the request ran out of time
	KindInsufficientMemory      // the model does not fit the worker's memory
	KindRequestTimeout          // the client did not send its request in time
	KindHTTPVersion             // the request's HTTP major version is not 1
	// KindRelayed is a worker's failed result, answered with the status
	// the worker gave it (see Relayed): the one status that is not the
	// table's. Without one it is an upstream failure.
	KindRelayed
)

// kindAnswer is a row of the table: the status a kind is answered with,
// the error type sent when the error names none, and the kind's name.
type kindAnswer struct {
	status int
	typ    string
	name   string
}

// answer is the table from Kind to HTTP status and default error type.
func (k Kind) answer() kindAnswer {
	switch k {
	case KindInvalidRequest:
		return kindAnswer{http.StatusBadRequest, TypeInvalidRequest, "invalid request"}
	case KindValidation:
		return kindAnswer{http.StatusUnprocessableEntity, TypeInvalidRequest, "validation"}
	case KindUnauthenticated:
		return kindAnswer{http.StatusUnauthorized, TypeAuthentication, "unauthenticated"}
	case KindPaymentRequired:
		return kindAnswer{http.StatusPaymentRequired, TypeInvalidRequest, "payment required"}
	case KindForbidden:
		return kindAnswer{http.StatusForbidden, TypePermission, "forbidden"}
	case KindPlanRequired:
		return kindAnswer{http.StatusForbidden, TypePlanRequired, "plan required"}
	case KindNotFound:
		return kindAnswer{http.StatusNotFound, TypeNotFound, "not found"}
	case KindMethodNotAllowed:
		return kindAnswer{http.StatusMethodNotAllowed, TypeInvalidRequest, "method not allowed"}
	case KindConflict:
		return kindAnswer{http.StatusConflict, TypeConflict, "conflict"}
	case KindTooLarge:
		return kindAnswer{http.StatusRequestEntityTooLarge, TypeInvalidRequest, "too large"}
	case KindHeadersTooLarge:
		return kindAnswer{http.StatusRequestHeaderFieldsTooLarge, TypeInvalidRequest, "headers too large"}
	case KindRateLimited:
		return kindAnswer{http.StatusTooManyRequests, TypeRateLimit, "rate limited"}
	case KindCapacity:
		return kindAnswer{http.StatusTooManyRequests, TypeRateLimit, "capacity"}
	case KindClientGone:
		// 499 is nginx's, for a client that closed the connection; the
		// client never reads it, but the usage log and metrics do.
		return kindAnswer{499, TypeInvalidRequest, "client gone"}
	case KindNotImplemented:
		return kindAnswer{http.StatusNotImplemented, TypeNotSupported, "not implemented"}
	case KindUpstream:
		return kindAnswer{http.StatusBadGateway, TypeUpstream, "upstream"}
	case KindUnavailable:
		return kindAnswer{http.StatusServiceUnavailable, TypeServiceUnavailable, "unavailable"}
	case KindTimeout:
		return kindAnswer{http.StatusGatewayTimeout, TypeTimeout, "timeout"}
	case KindInsufficientMemory:
		return kindAnswer{http.StatusInsufficientStorage, TypeInsufficientMemory, "insufficient memory"}
	case KindRequestTimeout:
		return kindAnswer{http.StatusRequestTimeout, TypeInvalidRequest, "request timeout"}
	case KindHTTPVersion:
		return kindAnswer{http.StatusHTTPVersionNotSupported, TypeNotSupported, "http version not supported"}
	case KindRelayed:
		return kindAnswer{http.StatusBadGateway, TypeUpstream, "relayed"}
	}
	return kindAnswer{http.StatusInternalServerError, TypeServer, "internal"}
}

// Status is the HTTP status of an error of kind k.
func (k Kind) Status() int { return k.answer().status }

func (k Kind) String() string { return k.answer().name }
