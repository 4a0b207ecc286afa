package responses_test

import "github.com/svc-dev/svc/internal/responses"

// toChat is Parse for the tests that need only the chat side.
func toChat(body []byte) ([]byte, string, bool, error) {
	r, err := responses.Parse(body)
	if err != nil {
		return nil, "", false, err
	}
	return r.Chat(), r.Model, r.Stream, nil
}

// fromChat is FromChat for a request that set no parameter: the echoed
// ones read as their defaults.
func fromChat(chat []byte, id string, createdAt int64) ([]byte, error) {
	return (&responses.Request{}).FromChat(chat, id, createdAt)
}

// newStream is NewStream for a request of model that set no parameter.
func newStream(id, model string, createdAt int64) *responses.Stream {
	return (&responses.Request{Model: model}).NewStream(id, createdAt)
}
