// Command idlecpu measures what idle keep-alive connections cost a server in CPU while a
// light request load runs: it starts a server process (h1, or plain net/http, with a
// handler that takes a few milliseconds, so that requests are running at every moment),
// opens -conns connections that each make one request and then stay idle, runs -rate
// requests a second over a few other connections, and reports the server process's CPU
// time (user + system, from /proc) per 10 seconds of that, over -dur.
//
//	go run ./internal/h1/idlecpu -conns 15000 -server h1
//	go run ./internal/h1/idlecpu -conns 15000 -server net/http
//
// The server runs in a child process so that its CPU time is its own and each process
// needs one file descriptor per connection (the soft limit is raised to the hard one).
// Linux only.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ceruleandb/cerulean/internal/h1"
)

func main() {
	conns := flag.Int("conns", 15000, "idle keep-alive connections")
	dur := flag.Duration("dur", 10*time.Second, "how long to measure")
	srvKind := flag.String("server", "h1", "h1 or net/http")
	rate := flag.Int("rate", 100, "requests a second of the light load")
	work := flag.Duration("work", 5*time.Millisecond, "how long each request's handler takes")
	child := flag.Bool("child", false, "run the server (internal)")
	flag.Parse()
	raiseFileLimit()
	if *child {
		serve(*srvKind, *work)
		return
	}
	cmd := exec.Command(os.Args[0], "-child", "-server", *srvKind, "-work", work.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	defer cmd.Process.Kill()
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	addr = strings.TrimSpace(addr)

	idle := make([]net.Conn, 0, *conns)
	for i := 0; i < *conns; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			log.Fatalf("connection %d: %v", i, err)
		}
		if err := get(c, bufio.NewReader(c), "/idle"); err != nil {
			log.Fatalf("connection %d: %v", i, err)
		}
		idle = append(idle, c)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const loaders = 4
	for range loaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				log.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			tick := time.NewTicker(time.Second * loaders / time.Duration(*rate))
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if err := get(c, br, "/work"); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	time.Sleep(2 * time.Second) // settle
	before := cpu(cmd.Process.Pid)
	start := time.Now()
	time.Sleep(*dur)
	used := cpu(cmd.Process.Pid) - before
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()
	fmt.Printf("server %s, %d idle connections, %d requests/s of %v: %.2f s of CPU per 10 s\n",
		*srvKind, len(idle), *rate, *work, used.Seconds()*float64(10*time.Second)/float64(elapsed))
	for _, c := range idle {
		c.Close()
	}
}

// get makes one request on c and reads its answer.
func get(c net.Conn, br *bufio.Reader, path string) error {
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: idlecpu\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// cpu is a process's user and system CPU time, from /proc/PID/stat (in clock ticks of
// 10ms, the USER_HZ of every Linux architecture Go runs on).
func cpu(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		log.Fatal(err)
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

func raiseFileLimit() {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// serve runs the server on a loopback port and prints its address.
func serve(kind string, work time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/work" {
			time.Sleep(work)
		}
		io.WriteString(w, "ok")
	})
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: time.Hour}
	fmt.Println(ln.Addr())
	switch kind {
	case "h1":
		err = (&h1.Server{HTTP: hs}).Serve(ln)
	case "net/http":
		err = hs.Serve(ln)
	default:
		log.Fatalf("-server %q: want h1 or net/http", kind)
	}
	log.Fatal(err)
}
