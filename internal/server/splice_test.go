package server

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A splice replays the link request to the home, then carries bytes both
// ways until an end closes; stopping the replica ends the splices it
// carries and takes no more.
func TestSplices(t *testing.T) {
	var sp splices
	worker, down := net.Pipe()
	up, home := net.Pipe()
	if !sp.add(up) {
		t.Fatal("add refused before close")
	}
	done := make(chan struct{})
	go func() {
		sp.run(down, up, []byte("HEAD\r\n\r\n"))
		close(done)
	}()
	buf := make([]byte, 8)
	if _, err := io.ReadFull(home, buf); err != nil || string(buf) != "HEAD\r\n\r\n" {
		t.Fatalf("home read %q, %v", buf, err)
	}
	go func() { _, _ = worker.Write([]byte("ping")) }()
	if _, err := io.ReadFull(home, buf[:4]); err != nil || string(buf[:4]) != "ping" {
		t.Fatalf("home read %q, %v", buf[:4], err)
	}
	go func() { _, _ = home.Write([]byte("pong")) }()
	if _, err := io.ReadFull(worker, buf[:4]); err != nil || string(buf[:4]) != "pong" {
		t.Fatalf("worker read %q, %v", buf[:4], err)
	}
	closed := make(chan struct{})
	go func() {
		sp.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close did not end the splice")
	}
	<-done
	if _, err := worker.Read(buf); err == nil {
		t.Fatal("the worker's connection is still open after close")
	}
	if c, _ := net.Pipe(); sp.add(c) {
		t.Fatal("a splice was taken after close")
	}
}

// The home gets the worker's own request, the token in it, for its host
// and path, marked spliced, without the splice parameter.
func TestSpliceRequest(t *testing.T) {
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/api/v1/workers/connect?splice=1")
	ctx.Request.Header.SetHost("lb.example.com")
	ctx.Request.Header.Set("Authorization", "Bearer svc_wt_secret")
	ctx.Request.Header.Set("Upgrade", "websocket")
	head, addr, useTLS, err := spliceRequest(&ctx, "https://gw-2.example.com", "/api/v1/workers/connect")
	if err != nil || addr != "gw-2.example.com:443" || !useTLS {
		t.Fatalf("%s %v %v", addr, useTLS, err)
	}
	for _, want := range []string{"GET /api/v1/workers/connect HTTP/1.1\r\n", "Host: gw-2.example.com\r\n",
		"Authorization: Bearer svc_wt_secret\r\n", "X-Svc-Spliced: 1\r\n"} {
		if !bytes.Contains(head, []byte(want)) {
			t.Errorf("head lacks %q:\n%s", want, head)
		}
	}
	if bytes.Contains(head, []byte("splice=1")) {
		t.Errorf("head keeps the splice parameter:\n%s", head)
	}
	if _, _, _, err := spliceRequest(&ctx, "ftp://x", "/"); err == nil {
		t.Error("a home URL that is not http(s) was taken")
	}
}
