package main

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// runLocal starts scripts/run-local (what `make run` runs) with env.
func runLocal(t *testing.T, env ...string) (*exec.Cmd, *lockedBuffer) {
	t.Helper()
	bin, err := buildBinary()
	require.NoError(t, err)
	dir := filepath.Dir(bin)
	if _, err := os.Stat(filepath.Join(dir, "example-agent")); err != nil {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "example-agent"), "../example-agent").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	cmd := exec.Command("../../scripts/run-local")
	cmd.Env = append(os.Environ(), append([]string{"BIN=" + dir, "BGJOBS_DATA_DIR=" + t.TempDir(), "REDIS_URL="}, env...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return cmd, out
}

// `make run` honours BGJOBS_ADDR and the agent's address, and when the
// port is taken it stops with a clear message before touching anything.
func TestMakeRunAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	t.Parallel()
	// A port already taken by something that counts every request.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var hits atomic.Int64
	go func() { _ = http.Serve(ln, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) })) }()
	t.Cleanup(func() { ln.Close() })
	cmd, out := runLocal(t, "BGJOBS_ADDR="+ln.Addr().String(), "BGJOBS_AGENT_ADDR=127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)))
	err = cmd.Wait()
	require.Error(t, err, "make run stops")
	require.Contains(t, out.String(), ln.Addr().String()+" is already in use")
	require.Zero(t, hits.Load(), "nothing was sent to whatever holds the port")

	addr, agent := "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)), "127.0.0.1:"+strconv.Itoa(testenv.FreePort(t))
	_, out = runLocal(t, "BGJOBS_ADDR="+addr, "BGJOBS_AGENT_ADDR="+agent)
	testenv.Eventually(t, 30*time.Second, "bgjobs serving on BGJOBS_ADDR", func() bool {
		return strings.Contains(out.String(), "bgjobs is serving on http://"+addr)
	})
	code, registered := client{t: t, base: "http://" + addr}.do("GET", "/v1/agents/default", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "http://"+agent+"/a2a", registered["a2a_url"], "the example agent registered at BGJOBS_AGENT_ADDR")
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		require.NotContains(t, sc.Text(), "127.0.0.1:8080", "no default address anywhere")
	}
}

// quickStartCommands are the shell commands of the README's quick start
// code blocks (continuation lines joined), in order, except `make`.
func quickStartCommands(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "## Quick start")
	end := strings.Index(doc[start+1:], "\n## ") + start + 1
	var cmds []string
	inBlock, cur := false, ""
	for _, line := range strings.Split(doc[start:end], "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			inBlock = !inBlock
		case inBlock && cur != "":
			cur += "\n" + line
		case inBlock && strings.HasPrefix(line, "curl "):
			cur = line
		}
		if cur != "" && !strings.HasSuffix(cur, "\\") {
			cmds = append(cmds, cur)
			cur = ""
		}
	}
	return cmds
}

// The README's quick start, as a new user runs it: `make run`'s script,
// then every curl command the README shows, with the answers it shows.
func TestReadmeQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	t.Parallel()
	cmds := quickStartCommands(t)
	require.GreaterOrEqual(t, len(cmds), 4, "the spawn, two drains and the work job")
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	_, out := runLocal(t, "BGJOBS_ADDR="+addr, "BGJOBS_AGENT_ADDR=127.0.0.1:"+strconv.Itoa(testenv.FreePort(t)))
	testenv.Eventually(t, 30*time.Second, "make run to serve", func() bool { return strings.Contains(out.String(), "bgjobs is serving") })
	c := client{t: t, base: "http://" + addr}
	var spawned []string
	for i, cmd := range cmds {
		cmd = strings.ReplaceAll(cmd, "127.0.0.1:8080", addr)
		if strings.Contains(cmd, "/drain") && len(spawned) > 0 {
			c.waitStatus(spawned[0], "completed") // a person reads the answer first
		}
		got, err := exec.Command("bash", "-c", cmd).Output()
		require.NoError(t, err, "README command %d: %s", i, cmd)
		switch {
		case strings.Contains(cmd, "/v1/jobs"):
			require.Contains(t, string(got), `"status":"queued"`, cmd)
			if strings.Contains(cmd, "start_in_s") {
				require.Contains(t, string(got), "Background agent scheduled: ", cmd)
			}
			spawned = append(spawned, string(got)[strings.Index(string(got), "bg-"):][:15])
		case strings.Contains(cmd, "/drain") && i == 1:
			require.Contains(t, string(got), spawned[0], "the first drain hands the result over")
			require.Contains(t, string(got), "<task-notification>")
		case strings.Contains(cmd, "/drain"):
			require.Contains(t, string(got), `{"notifications":[],"more":false}`, "the second drain: nothing again")
		}
	}
	require.Len(t, spawned, 3, "the turn, the work job and the one that starts later")
	c.waitStatus(spawned[1], "completed")

	// scripts/demo, which the README points to, against the same server.
	demo := exec.Command("../../scripts/demo")
	demo.Env = append(os.Environ(), "BGJOBS_URL=http://"+addr)
	got, err := demo.CombinedOutput()
	require.NoError(t, err, "%s", got)
	require.Contains(t, string(got), "<task-notification>")
	require.Contains(t, string(got), `{"notifications":[],"more":false}`)
}

// The README's "Running for real" commands: serve with a key and a worker
// on a shared Redis (a private one here, and loopback instead of 0.0.0.0).
func TestReadmeRunningForReal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	t.Parallel()
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	doc := string(raw)
	block := doc[strings.Index(doc, "## Running for real"):]
	block = block[strings.Index(block, "```sh\n")+6:]
	block = block[:strings.Index(block, "```")]
	srv := testenv.StartRedisServer(t)
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	bin, err := buildBinary()
	require.NoError(t, err)
	var procs []*exec.Cmd
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		line, _, _ = strings.Cut(line, "#")
		line = strings.NewReplacer("redis://127.0.0.1:6379/0", srv.URL(), "0.0.0.0:8080", addr, "bgjobs ", bin+" ").Replace(line)
		cmd := exec.Command("bash", "-c", strings.TrimSpace(line))
		cmd.Env = append(os.Environ(), "BGJOBS_DATA_DIR="+t.TempDir())
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out := &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start(), line)
		procs = append(procs, cmd)
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("%s:\n%s", line, out.String())
			}
		})
	}
	require.Len(t, procs, 2, "serve and a worker")
	testenv.Eventually(t, 20*time.Second, "serve to answer", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	code, _ := client{t: t, base: "http://" + addr}.do("GET", "/v1/jobs", nil)
	require.Equal(t, http.StatusUnauthorized, code, "keyed: no key, no access")
	for _, p := range procs {
		require.NoError(t, p.Process.Signal(syscall.Signal(0)), "still running")
	}
}

// The README and the docs link only inside the repository: a clone holds
// everything they point to.
func TestDocsLinkOnlyInsideTheRepository(t *testing.T) {
	t.Parallel()
	link := regexp.MustCompile(`\]\(([^)]+)\)`)
	for _, doc := range []string{"../../README.md", "../../docs/api.md", "../../docs/architecture.md"} {
		raw, err := os.ReadFile(doc)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target, _, _ := strings.Cut(m[1], "#")
			require.False(t, strings.Contains(target, "://"), "%s links outside the repository: %s", doc, m[1])
			if target == "" {
				continue
			}
			_, err := os.Stat(filepath.Join(filepath.Dir(doc), target))
			require.NoError(t, err, "%s links to %s, which the repository does not hold", doc, m[1])
		}
	}
}
