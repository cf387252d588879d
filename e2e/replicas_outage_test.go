package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/ceruleandb/cerulean/internal/pgtest"
)

// TestReplicaWrongDatabaseRefused (issue 44): `cerulean serve` with a replica URL that
// names the right standby but the wrong database (/postgres instead of the Cerulean
// database) does not start, and says which replica, which database and what is wrong.
func TestReplicaWrongDatabaseRefused(t *testing.T) {
	primary := postgresURL(t)
	prompt, _, promptSrc, _, _ := sharedReplicas(t)
	wrong, err := pgtest.DatabaseURL(prompt, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cerulean(t, nil, "serve", "--engine", "postgres", "--postgres-url", primary, "--postgres-replica-url", wrong,
		"--addr", fmt.Sprintf("127.0.0.1:%d", port), "--data", t.TempDir())
	if err == nil {
		t.Fatalf("cerulean serve started with a wrong-database replica URL:\n%s", out)
	}
	for _, want := range []string{strings.TrimPrefix(promptSrc, "replica "), `database "postgres"`, "no Cerulean schema", "another database"} {
		if !strings.Contains(out, want) {
			t.Errorf("the start-up error does not say %q:\n%s", want, out)
		}
	}
	t.Logf("refused (%v):\n%s", err, out)
}

// TestReplicaPrimaryDown (issue 44): a private cluster — a primary and a streaming standby
// of it (internal/pgtest) — behind a front end with the standby as its replica, and
// --replica-max-lag 3s and --max-staleness 2s so that an outage outlasts both. The primary
// is stopped (pg_ctl stop -m fast) for CERULEAN_TEST_OUTAGE (default 8 s) under reads at
// every level and writes. Throughout, Eventual, ConsistentPrefix and BoundedStaleness
// reads, and Session reads whose token the standby covers, are served by the caught-up
// standby; Strong reads, Session reads with a token it does not cover, and writes answer
// 503 ServerBusy with Retry-After. Once the primary is back, writes and Strong reads
// succeed again within 5 s.
func TestReplicaPrimaryDown(t *testing.T) {
	postgresURL(t) // skips without PostgreSQL (fails in CI)
	outage := 8 * time.Second
	if v := os.Getenv("CERULEAN_TEST_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CERULEAN_TEST_OUTAGE=%q: %v", v, err)
		}
		outage = d
	}
	p := pgtest.StartPrimary(t, pgtest.PrimaryOptions{Database: "cer"})
	standby := pgtest.StartStandby(t, pgtest.StandbyOptions{Primary: p})
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	debug := fmt.Sprintf("127.0.0.1:%d", port)
	srv := startServer(t, withArgs("--engine", "postgres", "--postgres-url", p.URL("cer"),
		"--postgres-replica-url", standby.URL("cer"), "--debug-addr", debug,
		"--replica-max-lag", "3s", "--max-staleness", "2s"))
	transport := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(transport.CloseIdleConnections)
	fe := replicaFrontEndOf(t, srv, debug, transport)
	standbySrc := replicaSource(t, standby.URL("cer"))
	waitReplicas(t, []*replicaFrontEnd{fe}, "in rotation", time.Minute, inRotation, standbySrc)
	client, _ := newTable(t, fe.svc)
	var token string
	for i := range 20 {
		h := &readHeaders{}
		if _, err := client.UpsertEntity(withReadHeaders(ctx(t), h), []byte(fmt.Sprintf(`{"PartitionKey":"p","RowKey":"%d","N":%d}`, i, i)), nil); err != nil {
			t.Fatal(err)
		}
		token = h.session
	}
	last, err := tokenPosition(token)
	if err != nil {
		t.Fatal(err)
	}
	waitReplicas(t, []*replicaFrontEnd{fe}, "caught up", time.Minute, func(s replicaState) bool {
		pos, err := parseLSN(s.ReplayPosition)
		return inRotation(s) && err == nil && pos >= last
	}, standbySrc)

	// What each kind of request must get while the primary is down.
	type kind struct {
		name   string
		served bool // by the standby; else 503 ServerBusy with Retry-After
		do     func(cx context.Context) (*readHeaders, error)
	}
	read := func(level, token string) func(cx context.Context) (*readHeaders, error) {
		return func(cx context.Context) (*readHeaders, error) {
			h := &readHeaders{level: level, token: token}
			_, err := client.GetEntity(withReadHeaders(cx, h), "p", "7", nil)
			return h, err
		}
	}
	future := fmt.Sprintf("1:postgres:%d", last+1<<30)
	kinds := []kind{
		{"Eventual", true, read("Eventual", "")},
		{"ConsistentPrefix", true, read("ConsistentPrefix", "")},
		{"BoundedStaleness", true, read("BoundedStaleness", "")},
		{"Session with a covered token", true, read("Session", token)},
		{"Session with a token it does not cover", false, read("Session", future)},
		{"Strong", false, read("Strong", "")},
		{"write", false, func(cx context.Context) (*readHeaders, error) {
			_, err := client.UpsertEntity(cx, []byte(`{"PartitionKey":"p","RowKey":"w","N":1}`), nil)
			return &readHeaders{}, err
		}},
	}
	var (
		mu     sync.Mutex
		errs   []string
		counts = map[string]int{}
	)
	check := func(k kind) {
		cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		h, err := k.do(cx)
		took := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		var re *azcore.ResponseError
		switch {
		case k.served && err != nil:
			errs = append(errs, fmt.Sprintf("%s read failed after %v: %v", k.name, took, err))
		case k.served && h.source != standbySrc:
			errs = append(errs, fmt.Sprintf("%s read served by %q, want the standby", k.name, h.source))
		case k.served:
			counts[k.name+" served"]++
		case err == nil:
			errs = append(errs, fmt.Sprintf("%s succeeded with the primary down (served by %q)", k.name, h.source))
		case !errors.As(err, &re) || re.StatusCode != http.StatusServiceUnavailable || re.ErrorCode != "ServerBusy" ||
			re.RawResponse == nil || re.RawResponse.Header.Get("Retry-After") == "":
			errs = append(errs, fmt.Sprintf("%s: %v, want 503 ServerBusy with Retry-After", k.name, err))
		default:
			counts[k.name+" 503"]++
		}
		if took > 2*time.Second {
			errs = append(errs, fmt.Sprintf("%s took %v", k.name, took))
		}
	}

	p.Stop()
	stoppedAt := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Since(stoppedAt) < outage {
				for _, k := range kinds {
					check(k)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	states, err := replicaStates(fe)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after %v without the primary: %v; standby %+v", outage, counts, states[standbySrc])

	p.Start()
	backAt := time.Now()
	var back time.Duration
	for {
		cx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, werr := client.UpsertEntity(cx, []byte(`{"PartitionKey":"p","RowKey":"w","N":2}`), nil)
		h := &readHeaders{level: "Strong"}
		_, rerr := client.GetEntity(withReadHeaders(cx, h), "p", "w", nil)
		cancel()
		if werr == nil && rerr == nil {
			back = time.Since(backAt)
			break
		}
		if time.Since(backAt) > 5*time.Second {
			t.Errorf("5 s after the primary was started again: write %v, Strong read %v", werr, rerr)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("writes and Strong reads served again %v after pg_ctl start returned", back.Round(time.Millisecond))
	for i, e := range errs {
		if i == 10 {
			t.Errorf("... %d in all", len(errs))
			break
		}
		t.Error(e)
	}
	for _, k := range kinds {
		if counts[k.name+" served"]+counts[k.name+" 503"] == 0 {
			t.Errorf("no %s request got its answer while the primary was down", k.name)
		}
	}
}
