package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svc-dev/svc/e2ee"
	"github.com/svc-dev/svc/internal/harness"
)

// secrets runs a gateway and workers at debug level through everything
// that handles a secret (the admin key, keys and worker tokens made and
// revoked on the admin socket, failed authentications with credentials
// shaped like real ones, end-to-end encrypted chats) and then looks for
// every secret and every encrypted plaintext in all the logs and in the
// store's raw bytes. It also checks the modes of the data directory and
// the files in it, and that the admin socket refuses another user, even
// with the directory's mode loosened.
func secrets(ctx context.Context, h *rig, r *result) error {
	g, err := h.startGateway(ctx, "secrets-gw", "--log-level", "debug")
	if err != nil {
		return err
	}
	defer g.Kill()
	var procs []*harness.Proc // every other process whose output is a log to search
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	e2eKeyFile := filepath.Join(h.dir, "secrets-w1.e2e")
	w1, err := h.startWorker(ctx, g, "secrets-w1", g.URL, "--engine", "sim", "--log-level", "debug", "--e2e-key", e2eKeyFile)
	if err != nil {
		return err
	}
	procs = append(procs, w1)

	sc := &secretCheck{h: h, g: g, r: r}
	sc.add("admin key", g.Key)
	if b, err := os.ReadFile(g.TokenFile()); err == nil {
		sc.add("bootstrap worker token", strings.TrimSpace(string(b)))
	} else {
		r.fail("read %s: %v", g.TokenFile(), err)
	}
	if b, err := os.ReadFile(e2eKeyFile); err == nil {
		// The file is the private key's seed; however it is encoded, no
		// log or store may hold it.
		sc.addBytes("worker e2e private key", b)
	} else {
		r.fail("read %s: %v", e2eKeyFile, err)
	}

	// Keys made on the admin socket: one used, one used then revoked,
	// one scoped.
	keyA, err := sc.createKey(ctx, "rel-a", "--unrestricted")
	if err != nil {
		return err
	}
	keyB, err := sc.createKey(ctx, "rel-b", "--unrestricted")
	if err != nil {
		return err
	}
	keyC, err := sc.createKey(ctx, "rel-c", "--perm", "inference:write")
	if err != nil {
		return err
	}
	sc.expectStatus(ctx, "new key rel-a", keyA.Secret, 200)
	sc.expectStatus(ctx, "new key rel-b", keyB.Secret, 200)
	sc.expectStatus(ctx, "scoped key rel-c", keyC.Secret, 200)
	if _, err := sc.admin(ctx, "keys", "revoke", keyB.Prefix); err != nil {
		r.fail("revoke key: %v", err)
	}
	sc.expectStatus(ctx, "revoked key rel-b", keyB.Secret, 401)
	if out, err := sc.admin(ctx, "keys", "list", "--json"); err != nil {
		r.fail("keys list: %v", err)
	} else {
		sc.notIn("`svc admin keys list` output", out)
	}
	if out, err := sc.admin(ctx, "keys", "list"); err != nil {
		r.fail("keys list: %v", err)
	} else {
		sc.notIn("`svc admin keys list` table", out)
	}

	// Failed authentications with credentials that look real: a real
	// key's id with a wrong secret, made-up keys, a token as a key, a key
	// in X-Api-Key.
	fakes := map[string]string{
		"real key id, wrong secret": keyA.Prefix + "_" + randomCredentialChars(40),
		"made-up key":               "svc_k_" + randomCredentialChars(12) + "_" + randomCredentialChars(40),
		"made-up short key":         "svc_k_" + randomCredentialChars(30),
		"worker token as a key":     sc.secret("bootstrap worker token"),
	}
	for what, fake := range fakes {
		if what != "worker token as a key" {
			sc.add("fake credential ("+what+")", fake)
		}
		sc.expectStatus(ctx, what, fake, 401)
	}
	if st, _, err := g.do(ctx, "GET", "/v1/models", nil, "Authorization", "", "X-Api-Key", fakes["real key id, wrong secret"]); err != nil || st != 401 {
		r.fail("wrong key in X-Api-Key: status %d, err %v; want 401", st, err)
	}

	// A request the HTTP parser refuses (a header line without a colon),
	// with a real key and a prompt: the parser's error quotes the request
	// it read, and neither may reach the debug log.
	for _, bad := range []struct{ what, method, header string }{
		{"a header line without a colon", "POST", "X-Broken header without a colon\r\n"},
		{"a method with a tab in it", "PO\tST", ""},
	} {
		rawMarker := "malformed-request-prompt-" + randomCredentialChars(24)
		sc.add("prompt of a request with "+bad.what, rawMarker)
		if st, err := sc.malformed(ctx, keyA.Secret, rawMarker, bad.method, bad.header); err != nil || st != 400 {
			r.fail("request with %s: status %d, err %v; want 400", bad.what, st, err)
		}
	}

	// A worker token made on the admin socket, used by a second worker.
	tok, err := sc.createToken(ctx, "rel-w2")
	if err != nil {
		return err
	}
	tokFile := filepath.Join(h.dir, "secrets-w2.token")
	if err := os.WriteFile(tokFile, []byte(tok.Secret+"\n"), 0o600); err != nil {
		return err
	}
	w2, err := harness.StartWorker(h.workerSpec("secrets-w2", g.URL, tokFile, "--engine", "sim", "--log-level", "debug"))
	if err != nil {
		return err
	}
	procs = append(procs, w2)
	if err := g.waitWorker(ctx, "secrets-w2", w2, 30*time.Second); err != nil {
		r.fail("worker with a token made on the admin socket: %v", err)
	}
	if out, err := sc.admin(ctx, "worker-tokens", "list", "--json"); err != nil {
		r.fail("worker-tokens list: %v", err)
	} else {
		sc.notIn("`svc admin worker-tokens list` output", out)
	}

	// Workers that must be refused: a revoked token, a real token's id
	// with a wrong secret, a made-up token.
	revoked, err := sc.createToken(ctx, "rel-w3")
	if err != nil {
		return err
	}
	if _, err := sc.admin(ctx, "worker-tokens", "revoke", revoked.Prefix); err != nil {
		r.fail("revoke worker token: %v", err)
	}
	badTokens := map[string]string{
		"revoked-token": revoked.Secret,
		"wrong-secret":  tok.Prefix + "_" + randomCredentialChars(40),
		"made-up-token": "svc_w_" + randomCredentialChars(12) + "_" + randomCredentialChars(40),
	}
	var refused []*harness.Proc
	for name, t := range badTokens {
		sc.add("worker token ("+name+")", t)
		ws := h.workerSpec("secrets-"+name, g.URL, "", "--engine", "sim", "--log-level", "debug")
		ws.Env = append(ws.Env, "SVC_WORKER_TOKEN="+t)
		p, err := harness.StartWorker(ws)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		refused = append(refused, p)
	}

	// Encrypted and ordinary chats, each with a marker only its prompt
	// holds.
	e2eClient := &http.Client{Transport: e2ee.NewTransport(client.Transport, nil)}
	for i := range scaled(h, 4, 40) {
		stream := i%2 == 1
		marker := "e2e-plaintext-" + randomCredentialChars(24)
		sc.add(fmt.Sprintf("encrypted prompt %d", i), marker)
		reply, err := sc.chat(ctx, e2eClient, keyA.Secret, "sim-chat", "Please keep this private: "+marker+"\nsim: tokens=40 tps=400", stream)
		if err != nil {
			r.fail("encrypted chat %d (stream %v): %v", i, stream, err)
			continue
		}
		sc.add(fmt.Sprintf("encrypted reply %d", i), reply)
	}
	// And once through the command line's own encrypting client.
	cliMarker := "e2e-cli-plaintext-" + randomCredentialChars(24)
	sc.add("encrypted prompt (svc chat --e2e)", cliMarker)
	cliReply, err := sc.cliChat(ctx, keyA.Secret, "Keep this between us: "+cliMarker+"\nsim: tokens=30 tps=400")
	if err != nil {
		r.fail("svc chat --e2e: %v", err)
	} else if len(strings.TrimSpace(cliReply)) < 20 {
		r.fail("svc chat --e2e printed %q, not a reply", cliReply)
	} else {
		sc.add("encrypted reply (svc chat --e2e)", strings.TrimSpace(cliReply))
	}
	var plainMarkers []string
	for i, stream := range []bool{false, true} {
		marker := "plain-prompt-" + randomCredentialChars(24)
		plainMarkers = append(plainMarkers, marker)
		if _, err := sc.chat(ctx, client, keyC.Secret, "sim-chat", "An ordinary prompt "+marker+"\nsim: tokens=20 tps=400", stream); err != nil {
			r.fail("ordinary chat %d: %v", i, err)
		}
	}
	if st, body, err := g.do(ctx, "POST", "/v1/embeddings", []byte(`{"model":"sim-embed","input":"ordinary text"}`), "Authorization", "Bearer "+keyA.Secret); err != nil || st != 200 {
		r.fail("embeddings: status %d, err %v: %s", st, err, tail(string(body), 300))
	}

	// Encrypted requests that fail on the worker, where error paths might
	// log what they hold. Last: a worker that failed several requests is
	// held back for a while.
	for i, directive := range []string{"sim: fail=500", "sim: fail=503 after=5", "sim: fail=cut after=5", "sim: tokens=bad"} {
		marker := "e2e-failing-plaintext-" + randomCredentialChars(24)
		sc.add(fmt.Sprintf("encrypted failing prompt %d", i), marker)
		if _, err := sc.chat(ctx, e2eClient, keyA.Secret, "sim-chat", "Private: "+marker+"\n"+directive, i%2 == 1); err == nil {
			r.fail("encrypted request scripted to fail (%s) succeeded", directive)
		}
	}
	r.figure("encrypted requests", "%d chats through e2ee.Transport (half streamed), 1 through svc chat --e2e, 4 scripted to fail on the worker", scaled(h, 4, 40))
	r.figure("refused credentials", "%d API keys (a revoked one, a real id with a wrong secret, made-up ones, a worker token), %d worker tokens (revoked, wrong secret, made-up)", len(fakes)+2, len(badTokens))
	for _, p := range refused {
		if err := g.waitWorker(ctx, strings.TrimPrefix(p.Name(), "worker-"), p, 3*time.Second); err == nil {
			r.fail("%s connected and is healthy", p.Name())
		}
	}

	sc.checkModes(e2eKeyFile, tokFile)
	sc.checkOtherUser(ctx)
	if out := checkLooseDataDir(ctx, h, r); out != "" {
		sc.notIn("second gateway's log", out)
	}

	// Stop everything gracefully so every log line and the last commit
	// are written before they are read.
	for _, p := range procs {
		_ = p.Stop(syscall.SIGTERM, stopGrace)
	}
	if err := g.Stop(syscall.SIGTERM, stopGrace); err != nil {
		r.fail("gateway stop: %v", err)
	}
	if c := crashed(g); c != "" {
		r.fail("gateway crashed: %s", c)
	}

	logs := map[string]string{g.Name(): g.Output()}
	for _, p := range procs {
		logs[p.Name()] = p.Output()
	}
	lines := 0
	for name, out := range logs {
		lines += strings.Count(out, "\n")
		sc.notIn(name+" log", out)
	}
	r.figure("log lines searched", "%d (gateway and %d workers, debug level)", lines, len(procs))
	leaked := 0
	for _, m := range plainMarkers {
		for _, out := range logs {
			if strings.Contains(out, m) {
				leaked++
				break
			}
		}
	}
	r.figure("ordinary prompts found in logs", "%d of %d (not a secret; for information)", leaked, len(plainMarkers))
	sc.checkStore()
	r.figure("secrets searched for", "%d (credentials, their secret parts, encrypted prompts and replies)", len(sc.secrets))
	return nil
}

// secretCheck holds the secrets a run made and where to look for them.
type secretCheck struct {
	h       *rig
	g       *gateway
	r       *result
	secrets []namedSecret
	// hashes are the hex SHA-256 of the API keys made, which the store
	// must hold: finding them shows the store's bytes were read.
	hashes []string
}

type namedSecret struct {
	name  string
	value string
}

// add records a secret and, for a credential, its secret part on its own
// (a log that trimmed the prefix would still leak it).
func (sc *secretCheck) add(name, v string) {
	if v == "" {
		sc.r.fail("%s is empty", name)
		return
	}
	sc.secrets = append(sc.secrets, namedSecret{name, v})
	if i := strings.LastIndexByte(v, '_'); strings.HasPrefix(v, "svc_") && len(v)-i-1 >= 16 {
		sc.secrets = append(sc.secrets, namedSecret{name + " (secret part)", v[i+1:]})
	}
}

// addBytes records a binary secret in the encodings a log might use.
func (sc *secretCheck) addBytes(name string, b []byte) {
	if s := strings.TrimSpace(string(b)); len(s) >= 16 && secretPrintable(s) {
		sc.secrets = append(sc.secrets, namedSecret{name, s})
		return
	}
	sc.secrets = append(sc.secrets, namedSecret{name + " (hex)", hex.EncodeToString(b)},
		namedSecret{name + " (base64)", strings.TrimRight(base64.StdEncoding.EncodeToString(b), "=")},
		namedSecret{name + " (base64url)", strings.TrimRight(base64.URLEncoding.EncodeToString(b), "=")})
}

func (sc *secretCheck) secret(name string) string {
	for _, s := range sc.secrets {
		if s.name == name {
			return s.value
		}
	}
	return ""
}

// notIn fails for every secret found in text.
func (sc *secretCheck) notIn(where, text string) {
	for _, s := range sc.secrets {
		if i := strings.Index(text, s.value); i >= 0 {
			sc.r.fail("%s holds the %s: ...%s...", where, s.name, redactAround(text, i, len(s.value)))
		}
	}
}

// redactAround shows the context of a find without the secret itself.
func redactAround(text string, i, n int) string {
	return text[max(0, i-120):i] + "<SECRET>" + text[i+n:min(len(text), i+n+120)]
}

func secretPrintable(s string) bool {
	for _, c := range s {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// admin runs `svc admin` against the gateway's data directory and returns
// its standard output, which may show a secret only when one is created.
func (sc *secretCheck) admin(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, sc.h.bin, append([]string{"admin", "--data", sc.g.Data}, args...)...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("svc admin %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

type createdSecret struct {
	Prefix string `json:"prefix"`
	Secret string `json:"secret"`
}

func (sc *secretCheck) createKey(ctx context.Context, name string, flags ...string) (createdSecret, error) {
	return sc.create(ctx, "key "+name, append([]string{"keys", "create", "--name", name, "--json"}, flags...)...)
}

func (sc *secretCheck) createToken(ctx context.Context, name string) (createdSecret, error) {
	return sc.create(ctx, "worker token "+name, "worker-tokens", "create", name, "--json")
}

func (sc *secretCheck) create(ctx context.Context, what string, args ...string) (createdSecret, error) {
	out, err := sc.admin(ctx, args...)
	if err != nil {
		return createdSecret{}, err
	}
	var c createdSecret
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Secret == "" || c.Prefix == "" {
		return createdSecret{}, fmt.Errorf("create %s: unexpected output %q (%v)", what, tail(out, 200), err)
	}
	if !strings.HasPrefix(c.Secret, c.Prefix+"_") {
		sc.r.fail("%s: secret does not start with its prefix %s", what, c.Prefix)
	}
	sc.add(what, c.Secret)
	if strings.HasPrefix(c.Secret, "svc_k_") {
		sum := sha256.Sum256([]byte(c.Secret))
		sc.hashes = append(sc.hashes, hex.EncodeToString(sum[:]))
	}
	return c, nil
}

// expectStatus presents key to an endpoint any valid key may read.
func (sc *secretCheck) expectStatus(ctx context.Context, what, key string, want int) {
	st, body, err := sc.g.do(ctx, "GET", "/v1/models", nil, "Authorization", "Bearer "+key)
	if err != nil || st != want {
		sc.r.fail("%s: GET /v1/models status %d (err %v), want %d: %s", what, st, err, want, tail(string(body), 200))
	}
}

// malformed sends key and prompt in a request with method and an extra
// header line that do not parse, over a connection of its own, and
// returns the status of the answer.
func (sc *secretCheck) malformed(ctx context.Context, key, prompt, method, header string) (int, error) {
	u, err := url.Parse(sc.g.URL)
	if err != nil {
		return 0, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	body := `{"model":"sim-chat","messages":[{"role":"user","content":"` + prompt + `"}]}`
	req := method + " /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
		"\r\n" + header + "Content-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(conn, req); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// cliChat runs `svc chat --e2e` with key in the environment, as a user
// would, and returns what it printed.
func (sc *secretCheck) cliChat(ctx context.Context, key, prompt string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, sc.h.bin, "chat", "sim-chat", prompt, "--e2e", "--no-stream", "--base-url", sc.g.URL)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "SVC_API_KEY="+key, "HOME="+sc.h.dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %s", err, errb.String())
	}
	return out.String(), nil
}

// chat sends one chat completion and returns the reply's text.
func (sc *secretCheck) chat(ctx context.Context, c *http.Client, key, model, prompt string, stream bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", sc.g.URL+"/v1/chat/completions", bytes.NewReader(chatBody(model, prompt, stream)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, tail(string(body), 300))
	}
	if stream {
		content, done, errFrame := streamContent(body)
		if !done || errFrame != "" {
			return "", fmt.Errorf("stream ended badly (done %v): %s", done, errFrame)
		}
		return content, nil
	}
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Choices) == 0 {
		return "", fmt.Errorf("reply %q: %v", tail(string(body), 300), err)
	}
	return out.Choices[0].Message.Content, nil
}

// checkModes wants the data directory 0700 and every file holding a
// secret, the socket and the database readable by their owner only.
func (sc *secretCheck) checkModes(extra ...string) {
	want := map[string]fs.FileMode{sc.g.Data: 0o700}
	for _, f := range []string{"admin.key", "worker.token", "admin.sock", "svc.db"} {
		want[filepath.Join(sc.g.Data, f)] = 0o600
	}
	for _, f := range extra {
		want[f] = 0o600
	}
	var seen []string
	for path, mode := range want {
		fi, err := os.Stat(path)
		if err != nil {
			sc.r.fail("stat %s: %v", path, err)
			continue
		}
		if got := fi.Mode().Perm(); got != mode {
			sc.r.fail("%s has mode %04o, want %04o", path, got, mode)
		}
		seen = append(seen, fmt.Sprintf("%s %04o", filepath.Base(path), fi.Mode().Perm()))
	}
	// Anything else the server put in its directory must not be readable
	// by others either.
	_ = filepath.WalkDir(sc.g.Data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == sc.g.Data {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.Mode().Perm()&0o077 != 0 {
			sc.r.fail("%s has mode %04o: group or others may use it", path, fi.Mode().Perm())
		}
		return nil
	})
	slices.Sort(seen)
	sc.r.figure("modes checked", "%s", strings.Join(seen, ", "))
}

// checkOtherUser runs an admin command as another uid: it must be
// refused, as it is, and again with the directory and socket opened to
// everyone, which leaves only the server's own check of its peer.
func (sc *secretCheck) checkOtherUser(ctx context.Context) {
	if os.Geteuid() != 0 {
		sc.r.figure("admin socket as another user", "skipped: not root, cannot run as another uid")
		return
	}
	dir, err := os.MkdirTemp("", "svc-reliability-nobody-")
	if err != nil {
		sc.r.fail("other user: %v", err)
		return
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "svc")
	if err := secretCopyFile(sc.h.bin, bin, 0o755); err != nil {
		sc.r.fail("other user: %v", err)
		return
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		sc.r.fail("other user: %v", err)
		return
	}
	sock := filepath.Join(sc.g.Data, "admin.sock")
	asNobody := func() (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "admin", "--socket", sock, "orgs", "list", "--json")
		cmd.Env = []string{"HOME=" + dir, "NO_COLOR=1", "PATH=/usr/bin:/bin"}
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	var verdicts []string
	out, err := asNobody()
	if err == nil {
		sc.r.fail("uid 65534 ran `svc admin orgs list` on the admin socket: %s", tail(out, 300))
	}
	verdicts = append(verdicts, "as is: "+socketRefusal(err, out))

	// Defence in depth: a directory and socket opened by mistake.
	// The harness's own directory, above the data directory, is 0700 too.
	restore := func() {
		_ = os.Chmod(sc.h.dir, 0o700)
		_ = os.Chmod(sc.g.Data, 0o700)
		_ = os.Chmod(sock, 0o600)
	}
	defer restore()
	if err := os.Chmod(sc.h.dir, 0o711); err != nil {
		sc.r.fail("loosen the harness directory: %v", err)
		return
	}
	if err := os.Chmod(sc.g.Data, 0o755); err != nil {
		sc.r.fail("loosen data dir: %v", err)
		return
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		sc.r.fail("loosen socket: %v", err)
		return
	}
	out, err = asNobody()
	if err == nil {
		sc.r.fail("uid 65534 ran `svc admin orgs list` through a socket opened to everyone: the server does not check its peer: %s", tail(out, 300))
	}
	verdicts = append(verdicts, "data dir 0755 and socket 0666: "+socketRefusal(err, out))
	if err != nil && !strings.Contains(sc.g.Output(), "refused a connection from another user") {
		sc.r.fail("uid 65534 was refused through an open socket, but the gateway did not log refusing it: %s", tail(out, 300))
	}
	restore()
	// The server's own user still gets in.
	if _, err := sc.admin(ctx, "orgs", "list"); err != nil {
		sc.r.fail("admin as the server's user after the other user's tries: %v", err)
	}
	sc.r.figure("admin socket as uid 65534", "%s", strings.Join(verdicts, "; "))
}

func socketRefusal(err error, out string) string {
	if err == nil {
		return "ALLOWED"
	}
	line := strings.TrimSpace(out)
	if i := strings.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	if i := strings.LastIndex(line, ": "); i >= 0 {
		line = line[i+2:]
	}
	return "refused (" + line + ")"
}

func secretCopyFile(from, to string, mode fs.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, mode)
}

// checkStore reads every file of the stopped gateway's data directory
// except the two that hold a credential by design.
func (sc *secretCheck) checkStore() {
	var raw []byte
	var names []string
	err := filepath.WalkDir(sc.g.Data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if n := d.Name(); n == "admin.key" || n == "worker.token" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sc.notIn("store file "+d.Name(), string(b))
		raw = append(raw, b...)
		names = append(names, fmt.Sprintf("%s (%d KiB)", d.Name(), len(b)>>10))
		return nil
	})
	if err != nil {
		sc.r.fail("read the data directory: %v", err)
	}
	found := 0
	for _, h := range sc.hashes {
		if bytes.Contains(raw, []byte(h)) {
			found++
		}
	}
	if found != len(sc.hashes) {
		sc.r.fail("the store holds %d of the %d created keys' hashes: its bytes were not all read, or keys are stored another way", found, len(sc.hashes))
	}
	sc.r.figure("store files searched", "%s; %d of %d key hashes found there", strings.Join(names, ", "), found, len(sc.hashes))
}

// randomAlnum is n characters of the credentials' alphabet.
func randomCredentialChars(n int) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

// checkLooseDataDir starts a gateway on a data directory made beforehand
// with mode 0755, as `mkdir` or a package would: the server must take
// group and other access away before it writes credentials there. It
// returns the gateway's log.
func checkLooseDataDir(ctx context.Context, h *rig, r *result) string {
	dir := filepath.Join(h.dir, "secrets-loose-data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		r.fail("make a loose data dir: %v", err)
		return ""
	}
	if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
		r.fail("loosen data dir: %v", err)
		return ""
	}
	g, err := h.startGateway(ctx, "secrets-loose")
	if err != nil {
		r.fail("gateway on a data dir made 0755 beforehand: %v", err)
		return ""
	}
	defer g.Kill()
	if strings.Contains(g.Output(), g.Key) {
		r.fail("second gateway's first-start log holds its admin key")
	}
	fi, err := os.Stat(dir)
	if err != nil {
		r.fail("stat %s: %v", dir, err)
		return ""
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		r.fail("a data dir made 0755 beforehand is still %04o after the gateway started and wrote its credentials there", perm)
	}
	r.figure("data dir made 0755 beforehand", "%04o once the gateway started", fi.Mode().Perm())
	return g.Output()
}
