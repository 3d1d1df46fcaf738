// Package redistest gives tests a real Redis: the shared server
// (TEST_REDIS_URL, else 127.0.0.1:6379) with a key prefix of the test's
// own, or a throwaway redis-server the test may kill and restart. Where
// neither exists the test is skipped with one line saying what to install.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/modules/testsupport/dbtest"
)

const sharedAddr = "127.0.0.1:6379"

// Patience is how long a test waits for Redis to show what takes
// milliseconds on an idle machine (a marker written in the background, a
// restarted server answering): test runs share a loaded machine.
const Patience = 2 * time.Minute

var (
	sharedOnce sync.Once
	sharedURL  string
)

// URL returns the URL of a Redis the test may use with its own prefix (see
// Prefix): the shared server, or else a throwaway one.
func URL(t testing.TB) string {
	t.Helper()
	sharedOnce.Do(func() {
		u := os.Getenv("TEST_REDIS_URL")
		if u == "" {
			u = "redis://" + sharedAddr
		}
		if p, err := url.Parse(u); err == nil && ping(p.Host) == nil {
			sharedURL = u
		}
	})
	if sharedURL != "" {
		return sharedURL
	}
	return Start(t).URL
}

// Prefix returns a key prefix no other test uses.
func Prefix(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "hookledger_test:" + hex.EncodeToString(b) + ":"
}

// Server is a throwaway redis-server of one test, without persistence.
type Server struct {
	URL  string
	addr string
	t    testing.TB
	cmd  *exec.Cmd
}

// Start runs a redis-server on a free port, stopped when the test ends;
// without redis-server installed the test is skipped.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redistest: no Redis on " + sharedAddr + " and no redis-server installed (install the redis-server package)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &Server{URL: "redis://" + addr, addr: addr, t: t}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Kill ends the server at once (SIGKILL); its data is gone.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port, empty, and waits until
// it answers.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	_, port, _ := net.SplitHostPort(s.addr)
	s.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	dbtest.DiesWithTest(s.cmd)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(Patience)
	for ping(s.addr) != nil {
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s did not answer within %s", s.addr, Patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping sends PING to addr and expects PONG.
func ping(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis %s answered %q", addr, line)
	}
	return nil
}
