package api

// Moderation on the link and in usage rows.
const (
	// KindModeration carries a ModerationRequest; the worker answers with
	// a ModerationReply.
	KindModeration = "moderation"
	// KindCompletion is a raw text completion (OpenAI's /v1/completions
	// shape) a worker sends its own engine: a guard whose exact prompt is
	// built by the worker, not by a chat template.
	KindCompletion = "completion"

	// RequestModeration is the usage row type of a moderation check.
	RequestModeration = "moderation"
)

// Features a worker announces in its hello; the gateway sends a request
// that needs one only to workers that have it.
const (
	// FeatureModeration is the moderation protocol: KindModeration
	// requests, and content filtering of chat.
	FeatureModeration = "moderation/1"
	// FeatureLiveTranscription is KindTranscriptionLive: streamed PCM in,
	// transcript events out.
	FeatureLiveTranscription = "transcription-live/1"
)

// ModerationImage is an image of a check: the bytes of a data: URL the
// gateway decoded and checked, or an https URL the worker fetches.
type ModerationImage struct {
	Data      []byte `json:"data,omitempty"`
	MediaType string `json:"media_type,omitempty"`
	URL       string `json:"url,omitempty"`
}

// ModerationCheck is content checked together, giving one result.
type ModerationCheck struct {
	Texts  []string          `json:"texts,omitempty"`
	Images []ModerationImage `json:"images,omitempty"`
}

// ModerationRequest is the body of a KindModeration request: checks run
// one after another, each giving one result, in order.
type ModerationRequest struct {
	Checks []ModerationCheck `json:"checks"`
	// AllowRemoteImages lets the worker fetch https image URLs (the
	// organisation's allow_remote_image_urls).
	AllowRemoteImages bool `json:"allow_remote_images,omitempty"`
}

// ModerationResult is one result of the moderations endpoint. Only the
// categories the model checks are present.
type ModerationResult struct {
	Flagged                   bool                `json:"flagged"`
	Categories                map[string]bool     `json:"categories"`
	CategoryScores            map[string]float64  `json:"category_scores"`
	CategoryAppliedInputTypes map[string][]string `json:"category_applied_input_types"`
}

// ModerationReply is a worker's answer to a KindModeration request.
type ModerationReply struct {
	Results []ModerationResult `json:"results"`
}

// Moderation error codes: error.code, and the X-Svc-Error-Code header.
const (
	CodeModelNotModeration         = "model_not_moderation"
	CodeImageInputNotSupported     = "image_input_not_supported"
	CodeEncryptedInputNotSupported = "encrypted_input_not_supported"
	CodeModelNotFound              = "model_not_found"
	CodeModerationUnavailable      = "moderation_unavailable"
	CodeModerationCapacity         = "moderation_capacity"
	CodeModerationInvalidVerdict   = "moderation_invalid_verdict"
)

// Codes of the image URLs of a moderation check.
const (
	// CodeRemoteImageURLNotAllowed: an https image URL from an
	// organisation that has not allowed them (data: URLs always work).
	CodeRemoteImageURLNotAllowed = "remote_image_url_not_allowed"
	// CodeRemoteImageRefused: the URL, its address, its redirect or its
	// content was refused by the worker fetching it.
	CodeRemoteImageRefused = "remote_image_refused"
	// CodeRemoteImageUnavailable: the worker could not fetch the image.
	CodeRemoteImageUnavailable = "remote_image_unavailable"
)

// Content filtering: what a blocked chat request gets.
const (
	// TypeContentFilter is the error type of a prompt content filtering
	// refused (400), with code CodeContentFiltered.
	TypeContentFilter   = "content_filter"
	CodeContentFiltered = "content_filtered"
	// FinishContentFilter ends a reply whose output was withheld.
	FinishContentFilter = "content_filter"
)

// Moderation outcomes of usage rows.
const (
	ModerationPass    = "pass"
	ModerationFlagged = "flagged"
	ModerationError   = "error"
)

// DefaultModerationModel checks content filtering's requests when the
// organisation chose no other model.
const DefaultModerationModel = "guard-b:0.6b"

// Limits of the moderations endpoint.
const (
	// ModerationMaxInputs bounds the strings or parts of one request.
	ModerationMaxInputs = 32
	// ModerationMaxImageBytes bounds one image, inline or fetched.
	ModerationMaxImageBytes = 20 << 20
)
