package rental

import (
	"fmt"

	"strings"
)

// WorkerArgs are the arguments of the svc worker a rental's machine runs
// (after "svc"), with the token read from tokenFile and models installed
// through engine ("ollama=URL", or "sim" for the simulator). Each model is
// offered under its variant id and set always-on: the worker loads it once
// installed and keeps it loaded.
func WorkerArgs(w WorkerSpec, tokenFile, engine string) []string {
	args := []string{"worker", "--gateway", w.Gateway, "--token-file", tokenFile, "--name", w.Name, "--engine", engine}
	ollama := strings.HasPrefix(engine, "ollama")
	for _, v := range w.Models {
		if ollama && v.Ollama != "" {
			args = append(args, "--pull", v.Ollama, "--model-alias", v.VariantID+"="+v.Ollama)
		} else {
			args = append(args, "--pull", v.VariantID)
		}
		args = append(args, "--always-on", v.VariantID)
	}
	return args
}

// BootOptions say how a cloud machine gets the worker.
type BootOptions struct {
	// WorkerURL is where the machine downloads svc for linux/amd64: a
	// release archive (.tar.gz holding svc) or the binary itself.
	WorkerURL string
}

// BootScript is the first-boot script of a cloud rental: it arms a
// shutdown timer on the machine itself (so a rental past its maximum
// runtime stops even when the gateway cannot reach the provider), installs
// Ollama and svc, and runs svc worker with the rental's token as a
// systemd service that restarts on failure. Its progress is logged to
// /var/log/svc-boot.log.
func BootScript(l Launch, o BootOptions) string {
	q := shellQuote
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	b.WriteString("# svc rental " + l.RentalID + "\n")
	b.WriteString("set -euo pipefail\nexec >>/var/log/svc-boot.log 2>&1\n")
	if l.Worker.MaxRuntime > 0 {
		minutes := int64((l.Worker.MaxRuntime + 59e9) / 60e9)
		fmt.Fprintf(&b, "# The maximum runtime, enforced here too.\nshutdown -h +%d 'svc rental reached its maximum runtime' || true\n", minutes)
	}
	b.WriteString("echo \"$(date -Is) pulling_image\"\n")
	b.WriteString("install -d -m 0700 /etc/svc\n")
	fmt.Fprintf(&b, "umask 077\nprintf '%%s' %s > /etc/svc/worker.token\n", q(l.Worker.Token))
	if strings.HasSuffix(o.WorkerURL, ".tar.gz") || strings.HasSuffix(o.WorkerURL, ".tgz") {
		fmt.Fprintf(&b, "curl -fsSL --retry 5 %s | tar -xzf - -C /usr/local/bin svc\n", q(o.WorkerURL))
	} else {
		fmt.Fprintf(&b, "curl -fsSL --retry 5 -o /usr/local/bin/svc %s\n", q(o.WorkerURL))
	}
	b.WriteString("chmod 0755 /usr/local/bin/svc\n")
	b.WriteString("command -v ollama >/dev/null || curl -fsSL --retry 5 https://ollama.com/install.sh | sh\n")
	b.WriteString("echo \"$(date -Is) runtime_ready\"\n")
	args := WorkerArgs(l.Worker, "/etc/svc/worker.token", "ollama=http://127.0.0.1:11434")
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = q(a)
	}
	// The command goes in a script of its own: systemd's ExecStart has
	// quoting rules of its own that a shell-quoted name would not follow.
	b.WriteString("cat > /etc/svc/run-worker <<'SVC_RUN'\n#!/bin/sh\nexec /usr/local/bin/svc " + strings.Join(quoted, " ") + "\nSVC_RUN\n")
	b.WriteString("chmod 0700 /etc/svc/run-worker\n")
	b.WriteString("cat > /etc/systemd/system/svc-worker.service <<'SVC_UNIT'\n")
	b.WriteString("[Unit]\nDescription=svc worker\nAfter=network-online.target ollama.service\nWants=network-online.target\n\n")
	b.WriteString("[Service]\nExecStart=/etc/svc/run-worker\n")
	b.WriteString("Restart=on-failure\nRestartSec=5\n\n[Install]\nWantedBy=multi-user.target\nSVC_UNIT\n")
	b.WriteString("systemctl daemon-reload\nsystemctl enable --now svc-worker.service\n")
	b.WriteString("echo \"$(date -Is) worker_started\"\n")
	return b.String()
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
