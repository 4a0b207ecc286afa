package api

// CodeNoPrivateInferenceWorker is the X-Svc-Error-Code of the 503 for a
// request sealed to a key no connected worker holds.
const CodeNoPrivateInferenceWorker = "no_private_inference_worker"

// E2EKey is the public key a worker serves private inference with, as it
// announces it in its hello: a new one each time the worker starts, unless
// it keeps its key in a file. The wire format is docs/e2e.md's.
type E2EKey struct {
	KeyID     string `json:"key_id"`
	Version   int    `json:"version"`
	KEMID     uint16 `json:"kem_id"`
	KDFID     uint16 `json:"kdf_id"`
	AEADID    uint16 `json:"aead_id"`
	PublicKey []byte `json:"public_key"`
}
