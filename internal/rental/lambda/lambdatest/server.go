// Package lambdatest is a fake of the Lambda Cloud API v1 for tests. It
// answers in the documented shapes: the {"data": ...} and {"error": {code,
// message, suggestion}} envelopes, with the documented status codes and
// error codes, under /api/v1. Knobs set capacity per instance type and
// region, slow boots, terminates that fail, rate limiting and lost launch
// answers; accessors let tests read what was launched and in what state.
package lambdatest

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Error codes, as documented.
const (
	CodeUnknown              = "global/unknown"
	CodeInvalidAPIKey        = "global/invalid-api-key"
	CodeInvalidParameters    = "global/invalid-parameters"
	CodeNotFound             = "global/object-does-not-exist"
	CodeInsufficientCapacity = "instance-operations/launch/insufficient-capacity"
)

// Instance statuses, as documented.
const (
	StatusBooting     = "booting"
	StatusActive      = "active"
	StatusUnhealthy   = "unhealthy"
	StatusTerminating = "terminating"
	StatusTerminated  = "terminated"
)

// InstanceType is an instance type the fake sells.
type InstanceType struct {
	Name              string
	Description       string
	GPUDescription    string
	PriceCentsPerHour int
	VCPUs             int
	MemoryGiB         int
	StorageGiB        int
	GPUs              int
}

// DefaultTypes is a catalogue shaped like Lambda's: its names,
// descriptions and specs, with made-up prices.
func DefaultTypes() []InstanceType {
	return []InstanceType{
		{"gpu_1x_h100_pcie", "1x H100 (80 GB PCIe)", "H100 (80 GB PCIe)", 249, 26, 200, 1024, 1},
		{"gpu_1x_h100_sxm5", "1x H100 (80 GB SXM5)", "H100 (80 GB SXM5)", 329, 26, 225, 2816, 1},
		{"gpu_8x_h100_sxm5", "8x H100 (80 GB SXM5)", "H100 (80 GB SXM5)", 2392, 208, 1800, 22528, 8},
		{"gpu_1x_a100", "1x A100 (40 GB PCIe)", "A100 (40 GB PCIe)", 129, 30, 200, 512, 1},
		{"gpu_1x_a100_sxm4", "1x A100 (40 GB SXM4)", "A100 (40 GB SXM4)", 129, 30, 200, 512, 1},
		{"gpu_8x_a100_80gb_sxm4", "8x A100 (80 GB SXM4)", "A100 (80 GB SXM4)", 1432, 240, 1800, 19456, 8},
		{"gpu_1x_a10", "1x A10 (24 GB PCIe)", "A10 (24 GB PCIe)", 75, 30, 200, 1400, 1},
		{"gpu_1x_a6000", "1x A6000 (48 GB)", "A6000 (48 GB)", 80, 14, 100, 512, 1},
		{"gpu_1x_gh200", "1x GH200 (96 GB)", "GH200 (96 GB)", 149, 64, 432, 4096, 1},
		{"gpu_1x_b200_sxm6", "1x B200 (180 GB SXM6)", "B200 (180 GB SXM6)", 499, 26, 360, 2867, 1},
		{"gpu_1x_rtx6000", "1x RTX 6000 (24 GB)", "RTX 6000 (24 GB)", 50, 14, 46, 512, 1},
		{"gpu_8x_v100_n", "8x Tesla V100 (16 GB)", "Tesla V100 (16 GB)", 440, 88, 448, 5888, 8},
	}
}

// regions are the documented region codes with descriptions.
var regions = map[string]string{
	"us-east-1": "Virginia, USA", "us-east-2": "Washington DC, USA", "us-east-3": "Virginia, USA",
	"us-west-1": "California, USA", "us-west-2": "Arizona, USA", "us-west-3": "Utah, USA",
	"us-south-1": "Texas, USA", "us-south-2": "North Texas, USA", "us-south-3": "Central Texas, USA",
	"us-midwest-1": "Illinois, USA", "us-midwest-2": "Illinois, USA",
	"europe-central-1": "Germany", "asia-south-1": "India", "me-west-1": "Israel",
	"asia-northeast-1": "Tokyo, Japan", "asia-northeast-2": "Osaka, Japan", "australia-east-1": "Sydney, Australia",
	"test-east-1": "Test East", "test-west-1": "Test West",
}

// LaunchRequest is a launch request as the fake received it.
type LaunchRequest struct {
	RegionName       string   `json:"region_name"`
	InstanceTypeName string   `json:"instance_type_name"`
	SSHKeyNames      []string `json:"ssh_key_names"`
	FileSystemNames  []string `json:"file_system_names"`
	Name             string   `json:"name"`
	Quantity         *int     `json:"quantity"`
	UserData         string   `json:"user_data"`
}

// Option sets up a Server.
type Option func(*Server)

// WithKey sets the API key the fake accepts.
func WithKey(key string) Option { return func(s *Server) { s.key = key } }

// WithTypes replaces the catalogue.
func WithTypes(types ...InstanceType) Option {
	return func(s *Server) {
		s.types = map[string]InstanceType{}
		for _, t := range types {
			s.types[t.Name] = t
		}
	}
}

// WithCapacity sets how many more machines of a type a region can launch.
func WithCapacity(typ, region string, n int) Option {
	return func(s *Server) { s.capacity[slot{typ, region}] = n }
}

// WithSSHKeys sets the account's SSH key names (default "svc-test").
func WithSSHKeys(names ...string) Option { return func(s *Server) { s.sshKeys = names } }

// WithBootPolls keeps a launched machine booting for n requests for it
// (GET /instances/{id}) before it is active.
func WithBootPolls(n int) Option { return func(s *Server) { s.bootPolls = n } }

// WithBootTime keeps a launched machine booting for d after its launch.
func WithBootTime(d time.Duration) Option { return func(s *Server) { s.bootTime = d } }

// WithNow sets the fake's clock (for WithBootTime).
func WithNow(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// Server is the fake API, an httptest.Server.
type Server struct {
	*httptest.Server

	mu        sync.Mutex
	key       string
	types     map[string]InstanceType
	capacity  map[slot]int
	sshKeys   []string
	bootPolls int
	bootTime  time.Duration
	now       func() time.Time

	instances map[string]*instance
	nextID    int
	launches  []LaunchRequest
	calls     map[string]int

	failTerminate map[string]int
	rateLimited   int
	loseLaunch    int
}

type slot struct{ typ, region string }

type instance struct {
	id, name, region, typ, status, userData string
	sshKeys                                 []string
	n                                       int // for its addresses
	pollsLeft                               int
	bootsUntil                              time.Time
	// A terminated instance is shown as such once; after that it is gone
	// and the API no longer knows it.
	shownTerminated, gone bool
}

// NewServer starts a fake, closed when the test ends.
func NewServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{key: "lambdatest-key", capacity: map[slot]int{}, sshKeys: []string{"svc-test"}, now: time.Now,
		instances: map[string]*instance{}, calls: map[string]int{}, failTerminate: map[string]int{}}
	WithTypes(DefaultTypes()...)(s)
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/instance-types", s.instanceTypes)
	mux.HandleFunc("GET /api/v1/instances", s.listInstances)
	mux.HandleFunc("GET /api/v1/instances/{id}", s.getInstance)
	mux.HandleFunc("POST /api/v1/instance-operations/launch", s.launch)
	mux.HandleFunc("POST /api/v1/instance-operations/terminate", s.terminate)
	mux.HandleFunc("GET /api/v1/ssh-keys", s.listSSHKeys)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, CodeNotFound, "Not found.", "")
	})
	s.Server = httptest.NewServer(s.guard(mux))
	t.Cleanup(s.Close)
	return s
}

// BaseURL is the API's base URL, for lambda.Config.BaseURL.
func (s *Server) BaseURL() string { return s.URL + "/api/v1" }

// Key is the API key the fake accepts.
func (s *Server) Key() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.key
}

// SetCapacity sets how many more machines of a type a region can launch.
func (s *Server) SetCapacity(typ, region string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capacity[slot{typ, region}] = n
}

// Capacity is how many more machines of a type a region can launch.
func (s *Server) Capacity(typ, region string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capacity[slot{typ, region}]
}

// FailTerminate makes the next n terminate requests naming instance id
// fail with a 500 and an error envelope.
func (s *Server) FailTerminate(id string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failTerminate[id] = n
}

// FailTerminateOnce makes the next terminate of instance id fail.
func (s *Server) FailTerminateOnce(id string) { s.FailTerminate(id, 1) }

// RateLimit answers the next n requests 429, asking for no wait.
func (s *Server) RateLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rateLimited = n
}

// LoseLaunchAnswers makes the next n launches happen but answer 500, as
// when a launch's answer is lost on the way back.
func (s *Server) LoseLaunchAnswers(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseLaunch = n
}

// AddInstance adds a machine as if launched some other way (the console,
// another tool) and returns its id.
func (s *Server) AddInstance(name, typ, region, status string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := s.newInstanceLocked(name, typ, region)
	in.status = status
	return in.id
}

// SetStatus sets an instance's status ("unhealthy", say).
func (s *Server) SetStatus(id, status string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.instances[id]; ok {
		in.status = status
	}
}

// Status is an instance's status; ok is false once the API no longer
// knows it.
func (s *Server) Status(id string) (status string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[id]
	if !ok || in.gone {
		return "", false
	}
	return in.status, true
}

// UserData is the user data instance id was launched with.
func (s *Server) UserData(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.instances[id]; ok {
		return in.userData
	}
	return ""
}

// Launches are the launch requests received, refused ones included.
func (s *Server) Launches() []LaunchRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.launches)
}

// Calls counts the requests for "METHOD /path" (the path without
// /api/v1, ids included: "GET /instances/abc") that got past the key
// check and the rate limit.
func (s *Server) Calls(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[route]
}

// guard checks the key as the API does (Bearer, or Basic with the key as
// the user name), then applies the rate limit and counts the call.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		key := s.key
		s.mu.Unlock()
		if !authorised(r.Header.Get("Authorization"), key) {
			writeError(w, http.StatusUnauthorized, CodeInvalidAPIKey, "API key was invalid, expired, or deleted.",
				"Check your API key or create a new one, then try again.")
			return
		}
		s.mu.Lock()
		limited := s.rateLimited > 0
		if limited {
			s.rateLimited--
		} else {
			s.calls[r.Method+" "+strings.TrimPrefix(r.URL.Path, "/api/v1")]++
		}
		s.mu.Unlock()
		if limited {
			// Lambda documents its limits but not the code of a 429;
			// clients act on the status and Retry-After.
			w.Header().Set("Retry-After", "0")
			writeError(w, http.StatusTooManyRequests, "global/rate-limited", "Too many requests.", "Try again shortly.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func authorised(h, key string) bool {
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || key == "" {
		return false
	}
	switch strings.ToLower(scheme) {
	case "bearer":
	case "basic":
		if b, err := base64.StdEncoding.DecodeString(cred); err == nil {
			cred = strings.TrimSuffix(string(b), ":")
		}
	default:
		return false
	}
	return subtle.ConstantTimeCompare([]byte(cred), []byte(key)) == 1
}

func (s *Server) instanceTypes(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]any{}
	for name, t := range s.types {
		avail := []regionJSON{}
		for _, reg := range slices.Sorted(maps.Keys(regions)) {
			if s.capacity[slot{name, reg}] > 0 {
				avail = append(avail, regionOf(reg))
			}
		}
		out[name] = map[string]any{"instance_type": typeJSONOf(t), "regions_with_capacity_available": avail}
	}
	writeData(w, out)
}

func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []instanceJSON{}
	for _, id := range slices.Sorted(maps.Keys(s.instances)) {
		in := s.instances[id]
		if in.gone {
			continue
		}
		s.bootLocked(in, false)
		out = append(out, s.jsonLocked(in))
	}
	writeData(w, out)
}

func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.instances[r.PathValue("id")]
	if !ok || in.gone {
		writeError(w, http.StatusNotFound, CodeNotFound, "Specified instance does not exist.", "")
		return
	}
	switch in.status {
	case StatusTerminating:
		in.status, in.shownTerminated = StatusTerminated, true
	case StatusTerminated:
		if in.shownTerminated {
			in.gone = true
			writeError(w, http.StatusNotFound, CodeNotFound, "Specified instance does not exist.", "")
			return
		}
		in.shownTerminated = true
	default:
		s.bootLocked(in, true)
	}
	writeData(w, s.jsonLocked(in))
}

// bootLocked moves a booting instance on: it is active once its polls
// and its boot time are both used up. poll says whether this request
// counts as one of its polls.
func (s *Server) bootLocked(in *instance, poll bool) {
	if in.status != StatusBooting {
		return
	}
	if in.pollsLeft > 0 {
		if poll {
			in.pollsLeft--
		}
		return
	}
	if !s.now().Before(in.bootsUntil) {
		in.status = StatusActive
	}
}

func (s *Server) launch(w http.ResponseWriter, r *http.Request) {
	var req LaunchRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 2<<20)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidParameters, "Invalid request data.", "")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.launches = append(s.launches, req)
	t, known := s.types[req.InstanceTypeName]
	_, region := regions[req.RegionName]
	switch {
	case req.RegionName == "" || !region:
		writeError(w, http.StatusBadRequest, CodeInvalidParameters, "Invalid request data: region_name.", "")
	case req.InstanceTypeName == "":
		writeError(w, http.StatusBadRequest, CodeInvalidParameters, "Invalid request data: instance_type_name.", "")
	case len(req.SSHKeyNames) != 1:
		writeError(w, http.StatusBadRequest, CodeInvalidParameters, "Exactly one SSH key must be specified.", "")
	case len(req.Name) > 64:
		writeError(w, http.StatusBadRequest, CodeInvalidParameters, "Invalid request data: name must be 64 characters or fewer.", "")
	case len(req.UserData) > 1<<20:
		writeError(w, http.StatusBadRequest, CodeInvalidParameters, "Invalid request data: user_data cannot exceed 1MB.", "")
	case req.Quantity != nil && *req.Quantity != 1:
		writeError(w, http.StatusBadRequest, CodeInvalidParameters, "Invalid request data: quantity.", "")
	case !known:
		writeError(w, http.StatusNotFound, CodeNotFound, "Instance type "+req.InstanceTypeName+" was not found.",
			"List the instance types to see which exist.")
	case !slices.Contains(s.sshKeys, req.SSHKeyNames[0]):
		writeError(w, http.StatusNotFound, CodeNotFound, "SSH key "+req.SSHKeyNames[0]+" was not found.",
			"Add the SSH key to your account, then try again.")
	case s.capacity[slot{t.Name, req.RegionName}] <= 0:
		writeError(w, http.StatusBadRequest, CodeInsufficientCapacity, "Not enough capacity to fulfill launch request.",
			"Try another instance type or region.")
	default:
		s.capacity[slot{t.Name, req.RegionName}]--
		in := s.newInstanceLocked(req.Name, t.Name, req.RegionName)
		in.userData, in.sshKeys = req.UserData, req.SSHKeyNames
		if s.loseLaunch > 0 {
			s.loseLaunch--
			writeError(w, http.StatusInternalServerError, CodeUnknown, "An unexpected error occurred.", "Try again shortly.")
			return
		}
		writeData(w, map[string]any{"instance_ids": []string{in.id}})
	}
}

func (s *Server) newInstanceLocked(name, typ, region string) *instance {
	s.nextID++
	in := &instance{id: fmt.Sprintf("%032x", 0x5c0000+s.nextID), n: s.nextID, name: name, region: region, typ: typ,
		status: StatusBooting, sshKeys: slices.Clone(s.sshKeys[:min(1, len(s.sshKeys))]),
		pollsLeft: s.bootPolls, bootsUntil: s.now().Add(s.bootTime)}
	s.instances[in.id] = in
	return in
}

func (s *Server) terminate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		IDs []string `json:"instance_ids"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil || len(req.IDs) == 0 {
		writeError(w, http.StatusBadRequest, CodeInvalidParameters, "Invalid request data.", "")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range req.IDs {
		if in, ok := s.instances[id]; !ok || in.gone {
			writeError(w, http.StatusNotFound, CodeNotFound, "Specified instance does not exist.", "")
			return
		}
	}
	for _, id := range req.IDs {
		if s.failTerminate[id] > 0 {
			s.failTerminate[id]--
			writeError(w, http.StatusInternalServerError, CodeUnknown, "An unexpected error occurred.", "Try again shortly.")
			return
		}
	}
	out := []instanceJSON{}
	for _, id := range req.IDs {
		in := s.instances[id]
		if in.status != StatusTerminating && in.status != StatusTerminated {
			in.status = StatusTerminating
			s.capacity[slot{in.typ, in.region}]++
		}
		out = append(out, s.jsonLocked(in))
	}
	writeData(w, map[string]any{"terminated_instances": out})
}

func (s *Server) listSSHKeys(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []map[string]string{}
	for i, k := range s.sshKeys {
		out = append(out, map[string]string{"id": fmt.Sprintf("%032x", 0x55a0+i), "name": k,
			"public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForLambdaTest " + k})
	}
	writeData(w, out)
}

type regionJSON struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

func regionOf(name string) regionJSON { return regionJSON{name, regions[name]} }

type specsJSON struct {
	VCPUs      int `json:"vcpus"`
	MemoryGiB  int `json:"memory_gib"`
	StorageGiB int `json:"storage_gib"`
	GPUs       int `json:"gpus"`
}

type typeJSON struct {
	Name              string    `json:"name"`
	Description       string    `json:"description"`
	GPUDescription    string    `json:"gpu_description"`
	PriceCentsPerHour int       `json:"price_cents_per_hour"`
	Specs             specsJSON `json:"specs"`
}

func typeJSONOf(t InstanceType) typeJSON {
	return typeJSON{t.Name, t.Description, t.GPUDescription, t.PriceCentsPerHour,
		specsJSON{t.VCPUs, t.MemoryGiB, t.StorageGiB, t.GPUs}}
}

type action struct {
	Available         bool   `json:"available"`
	ReasonCode        string `json:"reason_code,omitempty"`
	ReasonDescription string `json:"reason_description,omitempty"`
}

type instanceJSON struct {
	ID              string            `json:"id"`
	Name            string            `json:"name,omitempty"`
	IP              string            `json:"ip,omitempty"`
	PrivateIP       string            `json:"private_ip,omitempty"`
	Status          string            `json:"status"`
	SSHKeyNames     []string          `json:"ssh_key_names"`
	FileSystemNames []string          `json:"file_system_names"`
	Region          regionJSON        `json:"region"`
	InstanceType    typeJSON          `json:"instance_type"`
	Hostname        string            `json:"hostname,omitempty"`
	JupyterToken    string            `json:"jupyter_token,omitempty"`
	JupyterURL      string            `json:"jupyter_url,omitempty"`
	Actions         map[string]action `json:"actions"`
}

func (s *Server) jsonLocked(in *instance) instanceJSON {
	out := instanceJSON{ID: in.id, Name: in.name, Status: in.status, SSHKeyNames: slices.Clone(in.sshKeys),
		FileSystemNames: []string{}, Region: regionOf(in.region), InstanceType: typeJSONOf(s.types[in.typ])}
	if out.SSHKeyNames == nil {
		out.SSHKeyNames = []string{}
	}
	up := in.status == StatusActive || in.status == StatusUnhealthy
	if up {
		out.IP = fmt.Sprintf("198.51.100.%d", in.n%250+2)
		out.PrivateIP = fmt.Sprintf("10.0.2.%d", in.n%250+2)
		out.Hostname = strings.ReplaceAll(out.IP, ".", "-") + ".cloud.lambdalabs.com"
	}
	blocked := action{Available: false, ReasonCode: "vm-has-not-launched", ReasonDescription: "The instance has not launched yet."}
	if in.status == StatusTerminating || in.status == StatusTerminated {
		blocked = action{Available: false, ReasonCode: "vm-is-terminating", ReasonDescription: "The instance is terminating."}
	}
	actions := map[string]action{}
	for _, a := range []string{"migrate", "rebuild", "restart", "cold_reboot", "terminate"} {
		actions[a] = blocked
		if up || a == "terminate" && in.status == StatusBooting {
			actions[a] = action{Available: true}
		}
	}
	out.Actions = actions
	return out
}

func writeData(w http.ResponseWriter, data any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

func writeError(w http.ResponseWriter, status int, code, message, suggestion string) {
	e := map[string]any{"code": code, "message": message}
	if suggestion != "" {
		e["suggestion"] = suggestion
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}
