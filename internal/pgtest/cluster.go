package pgtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A high-availability cluster: three PostgreSQL servers managed by Patroni, with etcd as
// its store (Debian's patroni and etcd-server packages), as docs/high-availability.md
// sets it up on three hosts, here on one machine on free ports.
//
// The settings are those the page documents, with shorter timers so that a test's
// failover takes seconds:
//
//   - synchronous_mode and synchronous_mode_strict: a commit is acknowledged only once a
//     synchronous standby has flushed it, and Patroni promotes only that standby, so no
//     acknowledged write is lost; with no standby left, writes wait rather than go on
//     unprotected.
//   - primary_start_timeout 0: when the primary's postgres dies, its Patroni fails over
//     to the synchronous standby at once instead of restarting it in place (safe only
//     with synchronous replication, which the cluster has).
//   - ttl 10 s, loop_wait 1 s, retry_timeout 3 s: a primary whose Patroni stops
//     renewing the leader key (its host hung or cut off) loses it after 10 s.
//   - use_pg_rewind, wal_log_hints: the old primary rejoins as a standby of the new one.
//   - fsync off: the machine is not what fails here, processes are.
//   - Patroni talks to etcd through its v2 API (etcd --enable-v2; Patroni's etcd:
//     section, not etcd3:). Debian bookworm's Patroni 3.0.2 renews the leader key
//     through the v3 API with an unconditional put, so a primary whose Patroni was held
//     up past the ttl (its postgres hung, SIGSTOP) takes the key back from the node
//     promoted meanwhile: two primaries (seen in TestHAFailoverFreeze; fixed in Patroni
//     3.0.3, github.com/patroni/patroni/pull/2689). Its v2 renewal is a
//     compare-and-swap on the key's value.

// Cluster timers (Patroni's dynamic configuration): see above.
const (
	clusterTTL          = 10
	clusterLoopWait     = 1
	clusterRetryTimeout = 3
)

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Database, if not empty, is created on the primary once the cluster is healthy.
	Database string
}

// A Cluster is three PostgreSQL servers managed by Patroni and one etcd (StartCluster).
// Its methods must be called from the test's goroutine (they end the test with t.Fatal).
type Cluster struct {
	t        testing.TB
	dir      string
	bin      string
	as       []string
	etcd     *exec.Cmd
	etcdPort int
	// Nodes are the cluster's members, pg1 to pg3.
	Nodes []*Node
}

// A Node is one member of a Cluster: a Patroni and the PostgreSQL server it manages.
type Node struct {
	c    *Cluster
	Name string
	// Port is the PostgreSQL port, APIPort Patroni's REST API's.
	Port, APIPort int
	patroni       *exec.Cmd
	frozen        []int
}

// Member is a member as Patroni's GET /cluster reports it.
type Member struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, sync_standby, replica
	State    string `json:"state"` // running, streaming, stopped, starting, ...
	Port     int    `json:"port"`
	Timeline int    `json:"timeline"`
	Lag      any    `json:"lag"` // bytes, or "unknown"
}

// HaveCluster reports why the Patroni and etcd programs StartCluster needs are missing
// ("" when they are there).
func HaveCluster() string {
	for _, p := range []string{"patroni", "etcd"} {
		if _, err := exec.LookPath(p); err != nil {
			return p + " is not installed (Debian: apt-get install patroni etcd-server)"
		}
	}
	return ""
}

// StartCluster starts etcd and three Patroni nodes in a directory of their own under
// /var/tmp, and returns once one node leads, the two others stream from it and one of
// them is its synchronous standby. Without patroni or etcd the test skips (fails it in
// CI, where scripts/test installs them). When the test ends everything is stopped and
// the files removed.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if why := HaveCluster(); why != "" {
		missing(t, why)
	}
	c := &Cluster{t: t}
	c.bin, c.as = tools(t)
	dir, err := os.MkdirTemp("/var/tmp", "cerulean-ha-")
	if err != nil {
		t.Fatalf("cluster directory: %v", err)
	}
	c.dir = dir
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove cluster directory: %v", err)
		}
	})
	s := &Server{t: t, as: c.as}
	uid, gid := s.owner()
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatalf("cluster directory: %v", err)
	}
	began := time.Now()
	c.startEtcd()
	t.Cleanup(c.stop)
	for i := range 3 {
		n := &Node{c: c, Name: fmt.Sprintf("pg%d", i+1)}
		if n.Port, err = freePort(); err == nil {
			n.APIPort, err = freePort()
		}
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		if err := os.WriteFile(n.configPath(), []byte(n.config()), 0o644); err != nil {
			t.Fatalf("patroni configuration: %v", err)
		}
		c.Nodes = append(c.Nodes, n)
		n.start()
		if i == 0 {
			// The first bootstraps the cluster (initdb) alone; the others copy it.
			c.waitLeader(nil, waitLimit)
		}
	}
	c.WaitHealthy(2 * waitLimit)
	if opts.Database != "" {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			t.Fatalf("connect to the cluster's primary: %v", err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "create database "+pgx.Identifier{opts.Database}.Sanitize()); err != nil {
			t.Fatalf("create database %s: %v", opts.Database, err)
		}
	}
	t.Logf("Patroni cluster of 3 (%s) healthy after %v", c.Describe(), time.Since(began).Round(time.Millisecond))
	return c
}

func (c *Cluster) startEtcd() {
	c.t.Helper()
	var (
		peer int
		err  error
	)
	if c.etcdPort, err = freePort(); err == nil {
		peer, err = freePort()
	}
	if err != nil {
		c.t.Fatalf("free port: %v", err)
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	log, err := os.Create(filepath.Join(c.dir, "etcd.log"))
	if err != nil {
		c.t.Fatalf("etcd log: %v", err)
	}
	defer log.Close()
	cmd := exec.Command("etcd", "--name", "etcd1", "--data-dir", filepath.Join(c.dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "etcd1="+peerURL, "--initial-cluster-state", "new", "--enable-v2")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start etcd: %v", err)
	}
	c.etcd = cmd
	deadline := time.Now().Add(waitLimit)
	for {
		resp, err := http.Get(client + "/health")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), `"true"`) {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("etcd not healthy after %v: %v\n%s", waitLimit, err, tail(filepath.Join(c.dir, "etcd.log")))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *Node) configPath() string { return filepath.Join(n.c.dir, n.Name+".yml") }
func (n *Node) data() string       { return filepath.Join(n.c.dir, n.Name) }
func (n *Node) logPath() string    { return filepath.Join(n.c.dir, n.Name+".log") }

// config is the node's Patroni configuration (docs/high-availability.md has the same,
// with the production timers).
func (n *Node) config() string {
	return fmt.Sprintf(`scope: cerulean
namespace: /pgtest/
name: %[1]s
restapi:
  listen: 127.0.0.1:%[2]d
  connect_address: 127.0.0.1:%[2]d
etcd:
  hosts: 127.0.0.1:%[3]d
bootstrap:
  dcs:
    ttl: %[8]d
    loop_wait: %[9]d
    retry_timeout: %[10]d
    maximum_lag_on_failover: 1048576
    primary_start_timeout: 0
    synchronous_mode: true
    synchronous_mode_strict: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 200
        wal_log_hints: 'on'
        hot_standby: 'on'
        synchronous_commit: 'on'
        wal_keep_size: 256MB
        fsync: 'off'
  initdb:
  - encoding: UTF8
  - locale: C
  - auth: trust
  pg_hba:
  - local all all trust
  - host all all 127.0.0.1/32 trust
  - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:%[4]d
  connect_address: 127.0.0.1:%[4]d
  data_dir: %[5]s
  bin_dir: %[6]s
  pgpass: %[7]s/%[1]s.pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: '%[7]s'
`, n.Name, n.APIPort, n.c.etcdPort, n.Port, n.data(), n.c.bin, n.c.dir, clusterTTL, clusterLoopWait, clusterRetryTimeout)
}

// start starts the node's Patroni (as the clusters' owner), which starts its PostgreSQL.
func (n *Node) start() {
	n.c.t.Helper()
	log, err := os.OpenFile(n.logPath(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		n.c.t.Fatalf("patroni log: %v", err)
	}
	defer log.Close()
	argv := append(slices.Clone(n.c.as), "patroni", n.configPath())
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = n.c.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.c.t.Fatalf("start patroni: %v", err)
	}
	n.patroni = cmd
}

// stop stops every Patroni (each stops its PostgreSQL), then whatever PostgreSQL is left
// (pg_ctl stop -m immediate), then etcd.
func (c *Cluster) stop() {
	for _, n := range c.Nodes {
		n.Thaw()
		if n.patroni != nil && n.patroni.Process != nil {
			_ = syscall.Kill(-n.patroni.Process.Pid, syscall.SIGTERM)
		}
	}
	for _, n := range c.Nodes {
		if n.patroni == nil {
			continue
		}
		done := make(chan struct{})
		go func() { _ = n.patroni.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-n.patroni.Process.Pid, syscall.SIGKILL)
			<-done
		}
		s := &Server{t: c.t, bin: c.bin, as: c.as, dir: c.dir}
		if _, err := s.run("pg_ctl", "-D", n.data(), "status"); err == nil {
			_, _ = s.run("pg_ctl", "-D", n.data(), "-w", "-t", "60", "-m", "immediate", "stop")
		}
	}
	if c.etcd != nil {
		_ = syscall.Kill(-c.etcd.Process.Pid, syscall.SIGKILL)
		_ = c.etcd.Wait()
	}
}

// URL returns the URL of database db on the cluster as a front end names it: every node,
// with target_session_attrs=read-write, so that a new connection reaches whichever node
// is the primary now.
func (c *Cluster) URL(db string) string {
	hosts := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write",
		strings.Join(hosts, ","), db)
}

// URL returns the URL of database db on this node alone.
func (n *Node) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", n.Port, db)
}

// Members asks Patroni (any node that answers) for the cluster's members.
func (c *Cluster) Members() ([]Member, error) {
	var last error
	cl := &http.Client{Timeout: 2 * time.Second}
	for _, n := range c.Nodes {
		resp, err := cl.Get(fmt.Sprintf("http://127.0.0.1:%d/cluster", n.APIPort))
		if err != nil {
			last = err
			continue
		}
		var body struct {
			Members []Member `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		return body.Members, nil
	}
	return nil, fmt.Errorf("no Patroni answers: %w", last)
}

// Node returns the node named name (nil: none).
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Leader returns the node Patroni reports as the leader, running (nil: none now).
func (c *Cluster) Leader() *Node {
	ms, err := c.Members()
	if err != nil {
		return nil
	}
	for _, m := range ms {
		if m.Role == "leader" && m.State == "running" {
			return c.Node(m.Name)
		}
	}
	return nil
}

// WaitLeader waits until a node other than old leads and accepts writes, and returns it.
func (c *Cluster) WaitLeader(old *Node, limit time.Duration) *Node {
	c.t.Helper()
	return c.waitLeader(old, limit)
}

func (c *Cluster) waitLeader(old *Node, limit time.Duration) *Node {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if l := c.Leader(); l != nil && l != old && l.writable() {
			return l
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no new leader after %v: %s", limit, c.Describe())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writable reports whether the node's PostgreSQL accepts writes now.
func (n *Node) writable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, n.URL("postgres"))
	if err != nil {
		return false
	}
	defer conn.Close(context.Background())
	var inRecovery bool
	return conn.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&inRecovery) == nil && !inRecovery
}

// WaitHealthy waits until a node leads, every other one runs as a replica streaming from
// it without lag, and one of them is its synchronous standby.
func (c *Cluster) WaitHealthy(limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ms, err := c.Members()
		leaders, syncs, replicas := 0, 0, 0
		timeline := 0
		for _, m := range ms {
			if m.Role == "leader" && m.State == "running" {
				leaders++
				timeline = m.Timeline
			}
		}
		for _, m := range ms {
			lag, _ := m.Lag.(float64)
			if m.Role != "leader" && (m.State == "running" || m.State == "streaming") && m.Lag != nil && lag == 0 &&
				m.Timeline == timeline {
				replicas++
				if m.Role == "sync_standby" {
					syncs++
				}
			}
		}
		if err == nil && leaders == 1 && replicas == len(c.Nodes)-1 && syncs >= 1 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("cluster not healthy after %v: %s\n%s", limit, c.Describe(), c.logs())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Describe lists the members as Patroni reports them, for logs and failures.
func (c *Cluster) Describe() string {
	ms, err := c.Members()
	if err != nil {
		return err.Error()
	}
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s %s %s tl %d lag %v", m.Name, m.Role, m.State, m.Timeline, m.Lag)
	}
	return strings.Join(parts, "; ")
}

// logs returns the end of every node's Patroni log, for failure messages.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "--- %s:\n%s\n", n.Name, tail(n.logPath()))
	}
	return b.String()
}

// Logs is the end of every node's Patroni log (for a test's failure message).
func (c *Cluster) Logs() string { return c.logs() }

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	const n = 3000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Postmaster is the process id of the node's PostgreSQL postmaster (0: not running).
func (n *Node) Postmaster() int {
	b, err := os.ReadFile(filepath.Join(n.data(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var pid int
	if _, err := fmt.Sscan(line, &pid); err != nil || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

// KillPostmaster kills the node's postmaster with SIGKILL, as a crash would: its other
// processes notice at once and exit, every connection is cut (those PauseWALSenders
// stopped are killed too).
func (n *Node) KillPostmaster() {
	n.c.t.Helper()
	pm := n.Postmaster()
	if pm == 0 {
		n.c.t.Fatalf("%s: no postmaster running", n.Name)
	}
	if err := syscall.Kill(pm, syscall.SIGKILL); err != nil {
		n.c.t.Fatalf("%s: kill -9 %d: %v", n.Name, pm, err)
	}
	// The processes PauseWALSenders stopped die with it.
	for _, pid := range n.frozen {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	n.frozen = nil
}

// Freeze hangs the node's PostgreSQL as a host cut off without a connection reset looks:
// its postmaster and every process of it are stopped (SIGSTOP). Its Patroni's queries
// then hang too, so it stops renewing the leader key, which expires after the ttl. Thaw
// resumes it; the test's cleanup does too.
func (n *Node) Freeze() {
	n.c.t.Helper()
	pm := n.Postmaster()
	if pm == 0 {
		n.c.t.Fatalf("%s: no postmaster running", n.Name)
	}
	n.frozen = []int{pm}
	if err := syscall.Kill(pm, syscall.SIGSTOP); err != nil {
		n.c.t.Fatalf("SIGSTOP postmaster %d: %v", pm, err)
	}
	for _, pid := range children(pm) {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err == nil {
			n.frozen = append(n.frozen, pid)
		}
	}
}

// Thaw resumes what Freeze stopped.
func (n *Node) Thaw() {
	for i := len(n.frozen) - 1; i >= 0; i-- {
		_ = syscall.Kill(n.frozen[i], syscall.SIGCONT)
	}
	n.frozen = nil
}

// PauseWALSenders stops (SIGSTOP) the node's WAL senders: its standbys receive nothing
// more of what it writes from then on (what the kernel already holds for them aside). Thaw
// resumes them; KillPostmaster kills them with the postmaster, as if the host died
// before they could send the rest.
func (n *Node) PauseWALSenders() {
	n.c.t.Helper()
	pm := n.Postmaster()
	for _, pid := range children(pm) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(b), "walsender") {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			n.c.t.Fatalf("SIGSTOP walsender %d: %v", pid, err)
		}
		n.frozen = append(n.frozen, pid)
	}
	if len(n.frozen) == 0 {
		n.c.t.Fatalf("%s: no WAL sender (postmaster %d)", n.Name, pm)
	}
}
