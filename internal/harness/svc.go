package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// GatewaySpec says how to run `svc serve`.
type GatewaySpec struct {
	Spec // Args come after the harness's --addr, --data and --log-format json

	// Addr is where it listens. "" picks a free loopback port, kept across
	// restarts. Port 0 lets the gateway pick, which no other process can
	// take first; the address is then read from its log (so KeepLog is
	// implied), and its listening record, not a request to /healthz, says
	// it is up: its metrics stay the caller's own.
	Addr string
	Data string // the data directory, kept across restarts
}

// Gateway is a running `svc serve`.
type Gateway struct {
	*Proc        // the current run, replaced by Restart
	Addr  string // host:port
	URL   string
	Data  string
	spec  GatewaySpec
}

// StartGateway runs `svc serve` and waits until it answers.
func StartGateway(ctx context.Context, gs GatewaySpec) (*Gateway, error) {
	if gs.Data == "" {
		return nil, errors.New("harness: a gateway needs a data directory")
	}
	if gs.Name == "" {
		gs.Name = "svc serve"
	}
	g := &Gateway{Addr: gs.Addr, Data: gs.Data, spec: gs}
	if g.Addr == "" {
		addr, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		g.Addr = addr
	}
	if err := g.Restart(ctx); err != nil {
		return nil, err
	}
	return g, nil
}

// Restart runs the gateway again on the same address and data directory,
// after it was stopped or killed, and waits until it answers.
func (g *Gateway) Restart(ctx context.Context) error {
	s := g.spec.Spec
	s.Args = append([]string{"serve", "--addr", g.Addr, "--data", g.Data, "--log-format", "json"}, g.spec.Args...)
	_, port, err := net.SplitHostPort(g.Addr)
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	picks := port == "0"
	s.KeepLog = s.KeepLog || picks
	p, err := Start(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	url := "http://" + g.Addr
	if picks {
		var rec map[string]any
		rec, err = p.Log().WaitMsg(ctx, "listening")
		url, _ = rec["url"].(string)
	} else {
		err = WaitHTTP(ctx, url+"/healthz", p)
	}
	if err == nil && url == "" {
		err = errors.New("its listening record has no url")
	}
	if err != nil {
		p.Kill()
		return fmt.Errorf("%s: %w\n%s", s.Name, err, tail(p.Output(), 3000))
	}
	g.Proc = p
	// A gateway on a fixed address keeps its URL, which clients may be
	// reading while it restarts; only one that picks its port gets a new one.
	if picks || g.URL == "" {
		g.URL, g.Addr = url, strings.TrimPrefix(url, "http://")
	}
	return nil
}

// AdminKey is the key the first start wrote: an owner's of the default
// organisation.
func (g *Gateway) AdminKey() (string, error) {
	b, err := os.ReadFile(filepath.Join(g.Data, "admin.key"))
	if err != nil {
		return "", fmt.Errorf("read the admin key: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// TokenFile is the default organisation's worker token, which the first
// start wrote.
func (g *Gateway) TokenFile() string { return filepath.Join(g.Data, "worker.token") }

// WaitWorker waits until the gateway lists the worker called name as
// healthy to key. It polls every 10 ms, often enough to time a reconnect,
// for as long as ctx allows, and fails at once when p, if not nil, exits.
func (g *Gateway) WaitWorker(ctx context.Context, key, name string, p *Proc) error {
	exited := false
	err := Poll(ctx, 10*time.Millisecond, func() bool {
		if p != nil && p.Exited() {
			exited = true
			return true
		}
		st, body := get(ctx, g.URL+"/api/v1/workers", key)
		var list struct {
			Workers []struct {
				Name   string `json:"worker_name"`
				Status string `json:"status"`
			} `json:"workers"`
		}
		if st != 200 || json.Unmarshal(body, &list) != nil {
			return false
		}
		for _, w := range list.Workers {
			if w.Name == name && w.Status == "healthy" {
				return true
			}
		}
		return false
	})
	switch {
	case exited:
		return fmt.Errorf("worker %s exited: %v\n%s", name, p.Err(), tail(p.Output(), 3000))
	case err != nil:
		return fmt.Errorf("worker %s not healthy: %w", name, err)
	}
	return nil
}

// WorkerSpec says how to run `svc worker`.
type WorkerSpec struct {
	Spec             // Args come after the harness's --gateway, --name, --log-format json and --token-file
	Worker    string // its --name
	Gateway   string // the URL it dials: a gateway's, or a proxy's in front of one
	TokenFile string // "" leaves the token to Args or Env
}

// StartWorker runs `svc worker` and does not wait for it to connect: the
// caller knows what connected means, a gateway's listing
// (Gateway.WaitWorker) or the worker's own log.
func StartWorker(ws WorkerSpec) (*Proc, error) {
	s := ws.Spec
	if s.Name == "" {
		s.Name = "svc worker " + ws.Worker
	}
	s.Args = []string{"worker", "--gateway", ws.Gateway, "--name", ws.Worker, "--log-format", "json"}
	if ws.TokenFile != "" {
		s.Args = append(s.Args, "--token-file", ws.TokenFile)
	}
	s.Args = append(s.Args, ws.Args...)
	return Start(s)
}

// StartWorker runs `svc worker` for the gateway, by default with its
// binary, URL and token, and waits until the gateway lists it healthy.
func (g *Gateway) StartWorker(ctx context.Context, ws WorkerSpec) (*Proc, error) {
	if ws.Bin == "" {
		ws.Bin = g.spec.Bin
	}
	if ws.Gateway == "" {
		ws.Gateway = g.URL
	}
	if ws.TokenFile == "" {
		ws.TokenFile = g.TokenFile()
	}
	key, err := g.AdminKey()
	if err != nil {
		return nil, err
	}
	p, err := StartWorker(ws)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	if err := g.WaitWorker(ctx, key, ws.Worker, p); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// SimSpec says how to run `svc sim`, the simulated engine.
type SimSpec struct {
	Spec           // Args come after the harness's --addr and --options
	Options string // its --options
}

// StartSim runs `svc sim` on a port it picks and returns its base URL once
// it listens.
func StartSim(ctx context.Context, ss SimSpec) (*Proc, string, error) {
	s := ss.Spec
	if s.Name == "" {
		s.Name = "svc sim"
	}
	s.Args = append([]string{"sim", "--addr", "127.0.0.1:0", "--options", ss.Options}, ss.Args...)
	s.KeepLog = true
	p, err := Start(s)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	const prefix = "simulator listening on "
	line, err := p.Log().WaitLine(ctx, "its address", func(l string) bool { return strings.HasPrefix(l, prefix) })
	if err != nil {
		p.Kill()
		return nil, "", fmt.Errorf("%s: %w\n%s", s.Name, err, tail(p.Output(), 3000))
	}
	return p, strings.TrimPrefix(line, prefix), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
